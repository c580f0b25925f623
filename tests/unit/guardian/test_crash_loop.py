"""A backend that starts fine and crashes soon after, every time (guardian.cold, the exit
watcher in guardian.coordinator): each such crash is a failed recovery attempt, so the
guardian backs off 1, 2, 4, 8, 16, 30 s and then blocks, as for starts that fail.

Was: a successful start reset the attempt counter and every crash was recovered at once,
for ever (guardian.log: `exited unexpectedly (status 7)` every 1.5 s, the epoch climbing).
A generation that stayed up for the stable period (60 s) ends the streak: its crash is
recovered at once, as before.

Real coordinator, phase tables and state.db over the fake world of guardian.testing, with
a fake clock: what a generation's uptime is, and the waits, are the test's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from guardian.cold import recover_safely
from guardian.phases import Kind, Phase
from guardian.recovery import digest
from guardian.testing import FakeCoordinator, run_on

OLD = "a" * 64


class Clock:
    """The coordinator's clock and its waits: a wait moves the clock, never sleeps."""

    def __init__(self, co: FakeCoordinator) -> None:
        self.now = 1000.0
        self.slept: list[float] = []
        self.told: list[dict[str, Any] | None] = []   # status()'s recovery_failing
        co.clock = lambda: self.now   # type: ignore[method-assign]
        self.co = co

        async def sleep(delay: float) -> None:
            self.told.append(co.status()["recovery_failing"])
            self.slept.append(delay)
            self.now += delay
        co.sleep = sleep  # type: ignore[assignment]


async def until(what: str, cond: Callable[[], bool], within: float = 5.0) -> None:
    """Let the exit watcher act (launch verifies the release in a thread: real time)."""
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        await asyncio.sleep(0.001)


async def in_control(co: FakeCoordinator) -> Any:
    """A generation in control over one application, its certificate written."""
    await co.connect_owner()
    co.world.inventory = [{"stack": "s", "app": "a", "instance": 0, "generation": 1,
                           "launch_key": "k1", "pid": 500, "start_ticks": 9, "restarts": 0,
                           "state": "ready"}]
    bp = await co.boot_generation(OLD)
    co.world.certificate = {"valid": True, "body": {
        "activation": bp.activation, "epoch": bp.epoch, "release": bp.release,
        "owner": co.world.identity.to_wire(), "inventory_digest": digest(co.world.inventory),
        "launches": 1, "cursor": 3, "config_revision": "rev-1"}}
    return bp


async def crash(co: FakeCoordinator, clock: Clock, after: float, code: int = 7) -> None:
    """The generation in control exits ``after`` s (fake) after it started; returns once
    the guardian recovered another one or blocked."""
    bp = co.current
    assert bp is not None and bp.alive()
    clock.now += after
    bp.die(code)
    await until("a recovered generation or a block", lambda: co.blocked is not None or (
        co.current is not None and co.current is not bp and co.current.alive()))


def test_a_crash_soon_after_every_start_backs_off_then_blocks(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        clock = Clock(co)
        await in_control(co)
        crashes = 0
        while co.blocked is None and crashes < 12:   # the old code never stopped
            await crash(co, clock, 1.5)
            crashes += 1
        assert clock.slept == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
        assert crashes == 7
        assert [(f or {}).get("attempt") for f in clock.told] == [1, 2, 3, 4, 5, 6]
        assert all(f is not None and f["attempts"] == 7 and "exited 1.5 s after it started"
                   in f["error"] for f in clock.told), clock.told
        assert co.blocked is not None
        reason = co.blocked["reason"]
        assert reason.startswith(f"the backend of release {OLD[:12]} crashed 7 times "
                                 "within 60 s of starting: "), reason
        assert "(exit status 7)" in reason, reason
        assert "`tenure release select`" in co.blocked["next"], co.blocked
        assert co.recovery_failing is None and co.status()["recovery_failing"] is None
        assert co.world.alive() == []
        acts = [(a.kind, a.phase) for a in co.state.activations(8)]
        assert acts[0] == (Kind.RECOVER, Phase.BLOCKED)
        assert acts[1:7] == [(Kind.RECOVER, Phase.COMPLETE)] * 6
        assert acts[7] == (Kind.START, Phase.COMPLETE)
    run_on(tmp_path, go)


def test_a_generation_that_stayed_up_ends_the_streak_and_is_recovered_at_once(
        tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        clock = Clock(co)
        await in_control(co)
        for _ in range(3):
            await crash(co, clock, 2.0)
        assert clock.slept == [1.0, 2.0, 4.0]
        await crash(co, clock, 60.0)        # stable: recovered at once, the count reset
        assert clock.slept == [1.0, 2.0, 4.0]
        await crash(co, clock, 0.5)         # a new streak begins at its first wait
        assert clock.slept == [1.0, 2.0, 4.0, 1.0]
        assert co.blocked is None and len(co.world.alive()) == 1
    run_on(tmp_path, go)


def test_crashes_after_start_and_failed_starts_count_in_one_streak(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        clock = Clock(co)
        await in_control(co)
        co.world.start_fault = "timeout"     # the first recovery start fails
        await crash(co, clock, 1.0)
        assert clock.slept == [1.0, 2.0]      # the crash, then the failed start
        await crash(co, clock, 1.0)
        assert clock.slept == [1.0, 2.0, 4.0]
        assert co.blocked is None and len(co.world.alive()) == 1
    run_on(tmp_path, go)


def test_a_generation_adopted_at_guardian_start_is_recovered_at_once(tmp_path: Path) -> None:
    """How long an adopted generation ran is unknown: its crash starts no streak."""
    async def go(co: FakeCoordinator) -> None:
        clock = Clock(co)
        bp = await in_control(co)
        bp.up_since = None
        await crash(co, clock, 0.1)
        assert clock.slept == [] and co.blocked is None and len(co.world.alive()) == 1
    run_on(tmp_path, go)


def test_the_wait_between_attempts_leaves_room_for_the_operator(tmp_path: Path) -> None:
    """While recovery waits for its next attempt, no backend runs and the command lock is
    free: `tenure release select PREV` / `backend recover` land and start a generation;
    the waiting recovery then starts none beside it."""
    async def go(co: FakeCoordinator) -> None:
        clock = Clock(co)
        await in_control(co)
        gate = asyncio.Event()

        async def held(delay: float) -> None:
            clock.slept.append(delay)
            await gate.wait()
        co.sleep = held  # type: ignore[assignment]
        bp = co.current
        assert bp is not None
        clock.now += 1.5
        bp.die(7)
        await until("the first wait", lambda: clock.slept == [1.0])
        assert not co.command_lock.locked() and co.current is None
        failing = co.status()["recovery_failing"]
        assert failing is not None and failing["attempt"] == 1, failing
        async with co.command_lock:               # as the guardian's commands hold it
            act = await recover_safely(co)
        assert act is not None and act.phase is Phase.COMPLETE
        gate.set()
        for _ in range(50):
            await asyncio.sleep(0.001)
        (alive,) = co.world.alive()
        assert alive.activation == act.id and co.current is alive
        assert co.recovery_failing is None and co.blocked is None
    run_on(tmp_path, go)


@pytest.mark.parametrize("value, backoff, stable", [
    (None, (1.0, 2.0, 4.0, 8.0, 16.0, 30.0), 60.0),
    ("0.1", (0.1, 0.2, 0.4, 0.8, 1.6, 3.0), 6.0),
    ("nonsense", (1.0, 2.0, 4.0, 8.0, 16.0, 30.0), 60.0),
])
def test_the_timings_scale_for_tests_only_through_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None,
        backoff: tuple[float, ...], stable: float) -> None:
    if value is None:
        monkeypatch.delenv("TENURE_GUARDIAN_RECOVERY_SCALE", raising=False)
    else:
        monkeypatch.setenv("TENURE_GUARDIAN_RECOVERY_SCALE", value)

    async def go(co: FakeCoordinator) -> tuple[tuple[float, ...], float]:
        return co.backoff, co.stable_s
    got_backoff, got_stable = run_on(tmp_path, go)
    assert got_backoff == pytest.approx(backoff) and got_stable == pytest.approx(stable)


def test_an_owner_that_stalls_as_the_recovery_checks_is_retried_not_blocked(
        tmp_path: Path) -> None:
    """The owner stopped (SIGSTOP) for a few seconds as the backend crashed: the check's
    inventory call lost its connection, and the recovery blocked for good although the
    certificate covered the world. It is a failed attempt now, retried after its wait."""
    from protocol.errors import TransportLost

    async def go(co: FakeCoordinator) -> None:
        clock = Clock(co)
        bp = await in_control(co)
        bp.up_since = None                    # a crash that starts no streak
        co.world.fail["inventory"] = [TransportLost("connection lost"),
                                      TransportLost("connection lost")]
        await crash(co, clock, 0.1)
        assert co.blocked is None and clock.slept == [1.0, 2.0]
        assert len(co.world.alive()) == 1 and co.current is not bp
        assert co.recovery_failing is None
    run_on(tmp_path, go)


def test_a_full_disk_as_the_recovery_records_its_start_is_retried(tmp_path: Path) -> None:
    """state.db's insert of the new activation failed with 'database or disk is full':
    the recovery blocked as 'unexpected OperationalError', and did not try again once
    space was freed. It is STORAGE_FAILED now, a failed attempt like any other."""
    import sqlite3

    async def go(co: FakeCoordinator) -> None:
        clock = Clock(co)
        bp = await in_control(co)
        bp.up_since = None
        real = co.state.create_activation
        full = sqlite3.OperationalError("database or disk is full")
        full.sqlite_errorname = "SQLITE_FULL"  # type: ignore[attr-defined]
        calls = []

        def create(*a: Any, **kw: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                raise full
            return real(*a, **kw)
        co.state.create_activation = create  # type: ignore[method-assign]
        await crash(co, clock, 0.1)
        assert co.blocked is None and clock.slept == [1.0]
        assert "STORAGE_FAILED" in clock.told[0]["error"]   # type: ignore[index]
        assert len(co.world.alive()) == 1 and co.current is not bp
    run_on(tmp_path, go)
