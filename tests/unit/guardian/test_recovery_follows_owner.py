"""A recovery that fails against an owner (it refuses every fence, say) and waits for its
next attempt follows another owner instance at once when one answers meanwhile (an owner
maintenance window went back to the release it ran before): it attaches to it, starts the
streak afresh and tries again then, instead of waiting out its backoff.

Was: the whole backoff was waited with the owner watch held behind the recovery, so the
watch followed the new owner only once the recovery had blocked (over 90 s; a window's
wait for the backend on the owner it went back to timed out first).

Real coordinator, phase tables and state.db over the fake world of guardian.testing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from guardian import cold
from guardian.cold import recover_safely
from guardian.testing import FakeCoordinator, run_on
from protocol.errors import BadRequest, OwnerChanged
from protocol.identity import Identity

NEW = Identity("owner-2", 200, 11, "boot-1")
RELEASE = "a" * 64


async def _selected(co: FakeCoordinator) -> None:
    """Attached to the owner, a release selected, nothing running (a first start)."""
    await co.connect_owner()
    co.state.add_release(RELEASE)
    co.state.select(RELEASE, co.state.selector().revision)


def test_a_failing_recovery_follows_an_owner_that_replaced_it_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cold, "WATCH_EVERY_S", 0.001)

    async def go(co: FakeCoordinator) -> None:
        await _selected(co)
        co.world.fail["fence"] = [BadRequest("test: this owner refuses every fence")] * 9
        waits: list[float] = []

        async def backoff(delay: float) -> None:
            """The first wait: meanwhile the owner is replaced; it is never waited out."""
            waits.append(delay)
            co.world.identity, co.world.epoch, co.world.grant = NEW, 0, None
            co.world.fail = {"status": [OwnerChanged("test: another owner instance")]}
            await asyncio.Event().wait()
        co.sleep = backoff  # type: ignore[assignment]

        await asyncio.wait_for(recover_safely(co), 30)   # reached only when broken
        assert waits == [1.0]                             # one failed attempt, no more
        assert co.owner_identity == NEW
        assert co.current is not None and co.current.alive() and co.blocked is None
        assert co.recovery_attempts == 0 and co.recovery_failing is None
        assert co.world.grant is not None                 # fenced under the new owner
    run_on(tmp_path, go)


def test_a_wait_whose_owner_stays_the_same_is_waited_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cold, "WATCH_EVERY_S", 0.001)

    async def go(co: FakeCoordinator) -> None:
        await _selected(co)
        co.world.fail["fence"] = [BadRequest("test: refused once")]
        waits: list[float] = []

        async def backoff(delay: float) -> None:
            waits.append(delay)
            await asyncio.sleep(0.05)   # the watch asks the owner many times meanwhile
        co.sleep = backoff  # type: ignore[assignment]

        await asyncio.wait_for(recover_safely(co), 30)
        assert waits == [1.0]
        assert co.current is not None and co.current.alive()
        assert co.world.calls.count("owner.status") > 3
    run_on(tmp_path, go)


class Pinned(FakeCoordinator):
    """The real client's pin: once another owner instance answers, every call raises
    OwnerChanged until connect_owner attaches to it."""

    async def _owner_answer(self, method: str, params: dict[str, Any],
                            timeout: float | None) -> Any:
        if self.owner_identity is not None and self.owner_identity != self.world.identity:
            raise OwnerChanged("test: another owner instance answers")
        return await super()._owner_answer(method, params, timeout)


def test_the_owner_watch_does_not_follow_again_what_the_recovery_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: the watch, queued for the command lock behind the recovery, stopped the
    generation the recovery had just started under the new owner and recovered again."""
    monkeypatch.setattr(cold, "WATCH_EVERY_S", 0.001)

    async def go() -> None:
        co = Pinned(tmp_path)
        watch: asyncio.Future[None] | None = None
        try:
            await _selected(co)
            co.world.fail["fence"] = [BadRequest("test: this owner refuses every fence")]

            async def backoff(delay: float) -> None:
                co.world.identity, co.world.epoch, co.world.grant = NEW, 0, None
                await asyncio.Event().wait()
            co.sleep = backoff  # type: ignore[assignment]
            watch = asyncio.ensure_future(cold.watch_owner(co))
            async with co.command_lock:   # as follow_new_owner holds it
                await asyncio.wait_for(recover_safely(co), 30)
            first = co.current
            assert first is not None and co.owner_identity == NEW
            for _ in range(100):   # many rounds of the watch
                await asyncio.sleep(0.002)
            assert co.current is first and first.alive()
        finally:
            if watch is not None:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)
            await co.cancel_tasks()
            co.diagnostics.close()
            co.state.close()
    asyncio.run(go())
