"""A guardian that starts beside a backend generation that is alive but does not answer
(stopped, hung) neither fences it off nor starts another beside it (guardian.boot): it
asks again for a while and adopts it once it answers, or blocks at once naming its pid.

Was: live_backend took any failure for "nobody there", and the recovery that followed
fenced the silent generation off seven times, each new generation exiting
ALREADY_RUNNING beside it. Real coordinator, phase tables and state.db over the fake
world of guardian.testing, with a fake clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guardian.boot import SILENT_WAIT_S, boot, retry_silent
from guardian.recovery import digest
from guardian.testing import FakeCoordinator, run_on
from protocol.errors import BackendUnavailable, RequestTimedOut


class Clock:
    """The coordinator's clock and its waits: a wait moves the clock, never sleeps."""

    def __init__(self, co: FakeCoordinator) -> None:
        self.now = 1000.0
        self.slept: list[float] = []
        co.clock = lambda: self.now   # type: ignore[method-assign]

        async def sleep(delay: float) -> None:
            self.slept.append(delay)
            self.now += delay
        co.sleep = sleep  # type: ignore[assignment]


async def in_control(co: FakeCoordinator) -> Any:
    """A generation in control over one application, its certificate written."""
    await co.connect_owner()
    co.world.inventory = [{"stack": "s", "app": "a", "instance": 0, "generation": 1,
                           "launch_key": "k1", "pid": 500, "start_ticks": 9, "restarts": 0,
                           "state": "ready"}]
    bp = await co.boot_generation("a" * 64)
    co.world.certificate = {"valid": True, "body": {
        "activation": bp.activation, "epoch": bp.epoch, "release": bp.release,
        "owner": co.world.identity.to_wire(), "inventory_digest": digest(co.world.inventory),
        "launches": 1, "cursor": 3, "config_revision": "rev-1"}}
    return bp


def _silent_for(co: FakeCoordinator, questions: int | None) -> list[int]:
    """co.live_backend raises what a silent generation gives for its first
    ``questions`` calls (None: for ever), then answers; returns the calls' count."""
    asked = [0]
    answer = co.live_backend

    async def live() -> dict[str, Any] | None:
        asked[0] += 1
        if questions is None or asked[0] <= questions:
            raise BackendUnavailable("backend pid 4242 is alive but does not answer",
                                     {"silent": True, "pid": 4242, "cause": "TIMEOUT"})
        return await answer()
    co.live_backend = live  # type: ignore[method-assign]
    return asked


def test_a_start_adopts_a_silent_generation_once_it_answers(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        bp = await in_control(co)
        clock = Clock(co)
        epoch, acts = co.world.epoch, len(co.state.activations(100))
        co.current = None                      # as a new guardian finds it
        asked = _silent_for(co, 3)
        await boot(co)
        assert co.current is not None and co.current.pid == bp.pid
        assert co.blocked is None
        assert co.world.epoch == epoch          # never fenced off
        assert len(co.state.activations(100)) == acts
        assert asked[0] == 4 and sum(clock.slept) <= SILENT_WAIT_S
    run_on(tmp_path, go)


def test_a_start_beside_a_generation_that_stays_silent_blocks_naming_it(
        tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        await in_control(co)
        clock = Clock(co)
        epoch = co.world.epoch
        co.current = None
        _silent_for(co, None)
        await boot(co)
        assert co.current is None
        assert co.blocked is not None and co.world.epoch == epoch
        assert "backend pid 4242 is alive but does not answer" in co.blocked["reason"]
        assert "`kill -CONT 4242`" in co.blocked["next"]
        assert SILENT_WAIT_S <= sum(clock.slept) <= SILENT_WAIT_S + 1
    run_on(tmp_path, go)


async def _blocked_beside_a_silent_one(co: FakeCoordinator) -> tuple[Any, Any, list[int]]:
    """A start blocked beside a generation that stayed silent; then it is asked how it
    is doing by :func:`retry_silent` (the backend watch, every 2 s). Returns the
    generation, the world's own live_backend (it answers) and the silent one's count."""
    bp = await in_control(co)
    Clock(co)
    co.current = None
    answers = co.live_backend
    asked = _silent_for(co, None)
    await boot(co)
    assert co.blocked is not None and co.blocked["silent_pid"] == 4242
    return bp, answers, asked


def test_a_block_on_a_silent_generation_ends_by_itself_once_it_answers(
        tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        bp, answers, asked = await _blocked_beside_a_silent_one(co)
        epoch, acts = co.world.epoch, len(co.state.activations(100))
        before = asked[0]
        await retry_silent(co)                  # still silent: nothing changes
        assert asked[0] == before + 1
        assert co.current is None and co.blocked is not None
        assert len(co.state.activations(100)) == acts
        co.live_backend = answers               # type: ignore[method-assign]  # continued
        await retry_silent(co)
        assert co.current is not None and co.current.pid == bp.pid   # adopted
        assert co.blocked is None
        assert co.world.epoch == epoch          # never fenced off
    run_on(tmp_path, go)


def test_a_block_on_a_silent_generation_recovers_once_it_is_gone(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        bp, _answers, _asked = await _blocked_beside_a_silent_one(co)
        epoch = co.world.epoch

        async def nobody() -> None:
            return None
        co.live_backend = nobody  # type: ignore[method-assign,assignment]
        await retry_silent(co)
        assert co.blocked is None
        assert co.current is not None and co.current.pid != bp.pid   # recovered
        assert co.world.epoch > epoch           # the new generation's fence
    run_on(tmp_path, go)


def test_an_operators_command_that_came_first_has_the_block(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        _bp, answers, _asked = await _blocked_beside_a_silent_one(co)
        co.live_backend = answers               # type: ignore[method-assign]
        other = {"code": "RECOVERY_BLOCKED", "reason": "the operator's", "at": 0.0,
                 "next": "x"}
        co.blocked = other                      # e.g. `backend recover` blocked anew
        await retry_silent(co)
        assert co.current is None and co.blocked is other
    run_on(tmp_path, go)


def test_a_retry_the_owner_cut_short_keeps_the_block_and_is_tried_again(
        tmp_path: Path) -> None:
    """Was: the block was cleared before the start was done again; an owner that did not
    answer that once left no backend and no block, and nothing ever tried again."""
    async def go(co: FakeCoordinator) -> None:
        bp, _answers, _asked = await _blocked_beside_a_silent_one(co)
        bp.die(9)

        async def nobody() -> None:
            return None
        co.live_backend = nobody  # type: ignore[method-assign,assignment]
        co.world.fail["status"] = [RequestTimedOut("test: the owner stalls once")]
        await retry_silent(co)
        assert co.current is None and co.blocked is not None   # still blocked
        assert co.unhealthy is not None and co.unhealthy["task"] == "boot"
        await retry_silent(co)                                # the next probe
        assert co.current is not None and co.current.alive() and co.blocked is None
        assert co.unhealthy is None
    run_on(tmp_path, go)
