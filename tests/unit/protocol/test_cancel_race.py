"""A task cancelled in the same turn of the loop as the thing it awaits completes must
still end cancelled. ``asyncio.wait_for`` of Python 3.11 returns the result instead and
drops the cancellation, so a loop built on it (the backend's observation reader) could
outlive its own shutdown: a retired backend that never exits. These tests make the race
happen every time: the awaited thing completes, then the task is cancelled, before
either wakes."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

from backend.waiters import Waiters
from protocol.aclient import AsyncClient
from protocol.envelope import Event

ROOT = Path(__file__).resolve().parents[3]


async def _ends_cancelled(task: asyncio.Task[object]) -> bool:
    done, _ = await asyncio.wait({task}, timeout=2.0)
    if not done:
        task.cancel()  # the loop ignored one cancel: stop it so the test ends
        await asyncio.wait({task}, timeout=2.0)
        return False
    return task.cancelled()


def test_an_event_arriving_with_the_cancel_does_not_keep_the_reader_alive() -> None:
    async def main() -> bool:
        client = AsyncClient("/nonexistent/tenure-test.sock")

        async def reader() -> None:  # the shape of the backend's observation loop
            while True:
                await client.next_event(1.0)

        task = asyncio.create_task(reader())
        await asyncio.sleep(0)  # the reader now waits on the queue
        client._events.put_nowait(Event("observations", 1, {}))
        task.cancel()
        return await _ends_cancelled(task)

    assert asyncio.run(main())


def test_a_wake_arriving_with_the_cancel_does_not_keep_a_waiter_alive() -> None:
    async def main() -> bool:
        waiters = Waiters()
        task = asyncio.create_task(waiters.until(lambda: False, 30.0))
        await asyncio.sleep(0)
        waiters.wake()
        task.cancel()
        return await _ends_cancelled(task)

    assert asyncio.run(main())


def test_no_product_code_uses_asyncio_wait_for() -> None:
    """``asyncio.timeout()`` keeps a concurrent cancellation; 3.11's ``wait_for`` does
    not (fixed only in 3.12)."""
    found = []
    for pkg in ("owner", "guardian", "backend", "protocol", "units"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and node.attr == "wait_for" \
                        and isinstance(node.value, ast.Name) and node.value.id == "asyncio":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], "use `async with asyncio.timeout(...)` instead: " + ", ".join(found)
