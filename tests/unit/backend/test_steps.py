"""The drain barrier's gate: a paused gate begins no step, lets the running ones end,
and opens again on unpause. Nothing sleeps (the loop only yields)."""

from __future__ import annotations

import asyncio

import pytest

from backend.steps import StepGate
from protocol.errors import ShuttingDown


async def _yield(turns: int = 5) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


def test_a_paused_gate_lets_the_running_step_end_and_begins_no_other():
    async def main() -> None:
        gate = StepGate()
        release = asyncio.Event()

        async def one_step() -> None:
            with gate.step("restart a/b/0"):
                await release.wait()

        running = asyncio.create_task(one_step())
        await _yield()
        gate.pause()
        idle = asyncio.create_task(gate.wait_idle(60.0))
        await _yield()
        assert gate.running() == ["restart a/b/0"] and not idle.done()
        with pytest.raises(ShuttingDown) as exc, gate.step("restart a/b/1"):
            pass
        assert exc.value.data == {"step": "restart a/b/1"}
        release.set()
        assert await idle is True
        await running
        assert gate.running() == []
    asyncio.run(main())


def test_wait_idle_reports_a_step_that_does_not_end_in_time():
    async def main() -> None:
        gate = StepGate()
        with gate.step("stack stop web"):
            gate.pause()
            assert await gate.wait_idle(0.0) is False
        assert await gate.wait_idle(0.0) is True
    asyncio.run(main())


def test_a_step_boundary_waits_while_paused_and_goes_on_after_unpause():
    async def main() -> None:
        gate = StepGate()
        gate.pause()
        waiting = asyncio.create_task(gate.wait_open())
        await _yield()
        assert not waiting.done()
        gate.unpause()
        await asyncio.wait_for(waiting, 60.0)
        with gate.step("operation op-1 step 0"):
            assert gate.running() == ["operation op-1 step 0"]
    asyncio.run(main())


def test_a_step_that_raises_or_is_cancelled_still_ends():
    async def main() -> None:
        gate = StepGate()
        with pytest.raises(RuntimeError), gate.step("start web"):
            raise RuntimeError("boom")

        async def forever() -> None:
            with gate.step("stop web"):
                await asyncio.Event().wait()
        task = asyncio.create_task(forever())
        await _yield()
        assert gate.running() == ["stop web"]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert gate.running() == []
    asyncio.run(main())


def test_an_error_names_a_few_instances_and_counts_the_rest() -> None:
    """A step over 300 instances that failed to start said all of them in one 13 KB line."""
    from backend.operations import SAID_AT_MOST, listed
    keys = [f"s/a/{i}" for i in range(300)]
    said = listed(keys, "; ")
    assert said.startswith("s/a/0; s/a/1; ") and said.count("s/a/") == SAID_AT_MOST
    assert said.endswith("; and 292 more (`tenure status` lists them)")
    assert listed(keys[:3]) == "s/a/0, s/a/1, s/a/2"
