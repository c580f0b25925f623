"""confirm_stop against a scripted fake group and a fake clock: no processes, no sleep."""

from __future__ import annotations

import asyncio
import signal

from owner.specs import ExitStatus, StopPolicy
from owner.stop import StopOutcome, StopResult, confirm_stop

KILLED = ExitStatus(None, signal.SIGKILL)
TERMED = ExitStatus(None, signal.SIGTERM)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, dt: float) -> None:
        self.now += dt


class FakeGroup:
    """Leader plus ``members`` others; ``dies_on`` says which signals end whom."""

    def __init__(self, *, leader_dies_on: set[int], members_die_on: set[int],
                 members: int = 1, leader_gone: bool = False) -> None:
        self.leader = TERMED if leader_gone else None
        self.members = members
        self.leader_dies_on = leader_dies_on
        self.members_die_on = members_die_on
        self.sent: list[int] = []

    def leader_exit(self) -> ExitStatus | None:
        return self.leader

    def group_alive(self) -> bool:
        return self.leader is None or self.members > 0

    def send(self, sig: int) -> None:
        self.sent.append(sig)
        if self.leader is None and sig in self.leader_dies_on:
            self.leader = ExitStatus(None, sig)
        if sig in self.members_die_on:
            self.members = 0


def run(group: FakeGroup, policy: StopPolicy, clock: FakeClock) -> StopResult:
    return asyncio.run(confirm_stop(group, policy, clock=clock, sleep=clock.sleep))


ALL: set[int] = {signal.SIGTERM, signal.SIGKILL}
KILL_ONLY: set[int] = {signal.SIGKILL}


def test_polite_stop_is_not_escalated() -> None:
    g = FakeGroup(leader_dies_on=ALL, members_die_on=ALL)
    r = run(g, StopPolicy(timeout=5, kill_after=5), FakeClock())
    assert (r.outcome, r.escalated, r.exit) == (StopOutcome.STOPPED, False, TERMED)
    assert g.sent == [signal.SIGTERM, signal.SIGCONT]


def test_term_ignoring_group_is_escalated_after_the_timeout() -> None:
    g = FakeGroup(leader_dies_on=KILL_ONLY, members_die_on=KILL_ONLY)
    clock = FakeClock()
    r = run(g, StopPolicy(timeout=3, kill_after=5), clock)
    assert (r.outcome, r.escalated, r.exit) == (StopOutcome.STOPPED, True, KILLED)
    assert r.elapsed >= 3
    assert g.sent[-1] == signal.SIGKILL


def test_group_that_outlives_sigkill_is_reported_as_timeout() -> None:
    g = FakeGroup(leader_dies_on=ALL, members_die_on=set())
    r = run(g, StopPolicy(timeout=1, kill_after=2), FakeClock())
    assert (r.outcome, r.escalated) == (StopOutcome.TIMEOUT, True)
    assert r.elapsed >= 3


def test_exited_leader_with_empty_group_is_already_exited() -> None:
    g = FakeGroup(leader_dies_on=ALL, members_die_on=ALL, members=0, leader_gone=True)
    r = run(g, StopPolicy(), FakeClock())
    assert (r.outcome, r.escalated, r.elapsed, r.exit) == (
        StopOutcome.ALREADY_EXITED, False, 0.0, TERMED)
    assert g.sent == []


def test_exited_leader_with_living_group_gets_the_group_stopped() -> None:
    g = FakeGroup(leader_dies_on=ALL, members_die_on=KILL_ONLY, leader_gone=True)
    r = run(g, StopPolicy(timeout=1, kill_after=1), FakeClock())
    assert (r.outcome, r.escalated, r.exit) == (StopOutcome.STOPPED, True, TERMED)


def test_sigkill_policy_sends_no_sigcont() -> None:
    g = FakeGroup(leader_dies_on=ALL, members_die_on=ALL)
    r = run(g, StopPolicy(signal=signal.SIGKILL), FakeClock())
    assert r.outcome is StopOutcome.STOPPED and g.sent == [signal.SIGKILL]


def test_outcome_wire_values_never_change() -> None:
    assert [o.value for o in StopOutcome] == ["stopped", "already_exited", "timeout"]
    r = StopResult(StopOutcome.TIMEOUT, True, 1.5, None)
    assert r.to_wire() == {"outcome": "timeout", "escalated": True, "elapsed": 1.5,
                           "exit": None}


class LateLeader(FakeGroup):
    """A leader whose exit is taken up a moment after the signal (as the table does
    when its pidfd turns readable), completing the future ``gone()`` gave; ``sleeps``
    counts the pauses that ran to their end."""

    def __init__(self, members: int = 0) -> None:
        super().__init__(leader_dies_on=set(), members_die_on=set(), members=members)
        self.future: asyncio.Future[None] | None = None
        self.sleeps = 0

    def gone(self) -> asyncio.Future[None] | None:
        if self.leader is not None:
            return None
        if self.future is None:
            self.future = asyncio.get_running_loop().create_future()
        return self.future

    def send(self, sig: int) -> None:
        super().send(sig)
        if sig == signal.SIGTERM:
            asyncio.get_running_loop().call_soon(self._exited)

    def _exited(self) -> None:
        self.leader = TERMED
        if self.future is not None:
            self.future.set_result(None)

    async def sleep(self, dt: float) -> None:
        await asyncio.sleep(3600)   # a pause that is not cut short never ends here
        self.sleeps += 1


def test_the_leaders_exit_ends_the_pause_and_the_stop_at_once() -> None:
    async def main() -> tuple[StopResult, LateLeader]:
        g = LateLeader()
        r = await asyncio.wait_for(confirm_stop(
            g, StopPolicy(timeout=5, kill_after=5), clock=FakeClock(), sleep=g.sleep,
            leader_gone=g.gone), 10)
        return r, g
    r, g = asyncio.run(main())
    assert (r.outcome, r.escalated, r.exit, g.sleeps) == \
        (StopOutcome.STOPPED, False, TERMED, 0)
    assert g.sent == [signal.SIGTERM, signal.SIGCONT]


def test_once_the_leader_is_gone_what_is_left_is_polled() -> None:
    """A group that outlives its leader: the pauses after the exit run to their end (no
    busy loop on an event that stays set)."""
    clock = FakeClock()

    async def main() -> tuple[StopResult, FakeGroup]:
        g = FakeGroup(leader_dies_on=ALL, members_die_on=KILL_ONLY, leader_gone=True)
        return await confirm_stop(g, StopPolicy(timeout=1, kill_after=5), clock=clock,
                                  sleep=clock.sleep, leader_gone=lambda: None), g
    r, g = asyncio.run(main())
    assert (r.outcome, r.escalated) == (StopOutcome.STOPPED, True)
    assert r.elapsed >= 1 and g.sent[-1] == signal.SIGKILL
