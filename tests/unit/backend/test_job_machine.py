"""The job state machine: every (state, event) cell against an explicit expectation,
the paths through it, the one-shot start rule, and a strict, fuzzed ``from_wire``."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.jobs import machine as jm
from backend.jobs.machine import (
    EVENT_TYPES,
    TRANSITIONS,
    Exited,
    Job,
    Launch,
    Launched,
    LaunchRefused,
    Lost,
    Missed,
    Outcome,
    Proven,
    Resolve,
    Start,
    State,
    Stop,
    StopReason,
    StopRequested,
    TimedOut,
    Uncertain,
    Withdraw,
)
from protocol.errors import BadRequest, Conflict

S = State
PREFIX = "job:abcd"


def in_state(state: State, timeout: float | None = 30.0) -> Job:
    """A record brought to ``state`` through the machine itself."""
    job = Job(7, "s", "migrate", timeout)
    steps: dict[State, list[jm.Event]] = {
        S.ADMITTED: [],
        S.STARTING: [Start(PREFIX)],
        S.RUNNING: [Start(PREFIX), Launched(100, 1000)],
        S.SUCCEEDED: [Start(PREFIX), Launched(100, 1000), Exited(0, None)],
        S.FAILED: [Start(PREFIX), Launched(100, 1000), Exited(3, None)],
        S.TIMED_OUT: [Start(PREFIX), Launched(100, 1000), TimedOut(), Exited(None, 15)],
        S.WITHDRAWN: [Withdraw()],
        S.MISSED: [Missed()],
        S.RECOVERY_REQUIRED: [Start(PREFIX), Uncertain({"why": "test"})],
        S.RESOLVED: [Start(PREFIX), Uncertain({"why": "test"}), Resolve(True, "checked")],
    }
    for ev in steps[state]:
        job.handle(ev, 1000.0, 50.0)
    assert job.state is state
    return job


EVENTS: dict[type[jm.Event], jm.Event] = {
    Start: Start(PREFIX), Launched: Launched(100, 1000),
    LaunchRefused: LaunchRefused("LAUNCH_FAILED", "no such file"), Exited: Exited(0, None),
    Lost: Lost({"why": "gone"}), Uncertain: Uncertain({"why": "unknown"}),
    Withdraw: Withdraw(), Missed: Missed(), StopRequested: StopRequested(),
    TimedOut: TimedOut(), Resolve: Resolve(False, "checked"),
    Proven: Proven("job:abcd:7:1", Launched(100, 1000), {"shows": "test"}, "the backend"),
}

# What each event does in each state, in State order (admitted, starting, running,
# succeeded, failed, timed_out, withdrawn, missed, recovery_required, resolved):
# a state name is where the record goes, "=" means unchanged, "!" means Conflict.
_ = "="
X = "!"
EXPECTED: dict[type[jm.Event], tuple[str, ...]] = {
    Start: ("starting", _, _, _, _, _, _, _, _, _),
    Launched: (_, "running", _, _, _, _, _, _, _, _),
    LaunchRefused: (_, "failed", _, _, _, _, _, _, _, _),
    Exited: (_, "succeeded", "succeeded", _, _, _, _, _, _, _),
    Lost: (_, "failed", "failed", _, _, _, _, _, _, _),
    Uncertain: (_, "recovery_required", _, _, _, _, _, _, _, _),
    Withdraw: ("withdrawn", X, X, X, X, X, _, X, X, X),
    Missed: ("missed", _, _, _, _, _, _, _, _, _),
    StopRequested: (X, X, _, X, X, X, X, X, X, X),
    TimedOut: (_, _, _, _, _, _, _, _, _, _),
    Resolve: (X, X, X, X, X, X, X, X, "admitted", X),
    Proven: (_, _, _, _, _, _, _, _, "running", _),
}


def test_the_table_is_complete() -> None:
    assert set(TRANSITIONS) == {(s, e) for s in State for e in EVENT_TYPES}
    assert set(EXPECTED) == set(EVENT_TYPES) == set(EVENTS)


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("event", list(EVENT_TYPES), ids=lambda e: e.__name__)
def test_every_cell_does_what_the_table_says(state: State, event: type[jm.Event]) -> None:
    job = in_state(state)
    before = job.to_wire()
    want = EXPECTED[event][list(State).index(state)]
    if want == X:
        with pytest.raises(Conflict) as err:
            job.handle(EVENTS[event], 2000.0, 60.0)
        assert err.value.data == {"job": 7, "state": state.value}
        assert job.to_wire() == before      # a refusal changes nothing
        return
    job.handle(EVENTS[event], 2000.0, 60.0)
    assert job.state.value == (state.value if want == _ else want)
    Job.from_wire(job.to_wire())            # every reachable record is a valid one


def test_happy_path_with_times_and_deadline() -> None:
    job = Job(3, "s", "migrate", timeout=10.0)
    assert job.handle(Start(PREFIX), 100.0, 5.0) == [Launch("job:abcd:3:1")]
    assert (job.state, job.attempt, job.launch_key) == (S.STARTING, 1, "job:abcd:3:1")
    assert job.handle(Launched(42, 4200), 101.0, 6.0) == []
    assert (job.pid, job.start_ticks, job.started_at, job.deadline) == (42, 4200, 101.0, 16.0)
    job.handle(Exited(0, None), 105.5, 10.5)
    assert (job.state, job.outcome, job.ended_at, job.deadline) == \
        (S.SUCCEEDED, Outcome.SUCCESS, 105.5, None)


@pytest.mark.parametrize(("code", "sig", "reason", "state", "outcome"), [
    (0, None, None, S.SUCCEEDED, Outcome.SUCCESS),
    (2, None, None, S.FAILED, Outcome.EXIT_CODE),
    (None, 9, None, S.FAILED, Outcome.SIGNAL),
    (None, 15, StopReason.REQUESTED, S.FAILED, Outcome.STOPPED),
    (0, None, StopReason.REQUESTED, S.FAILED, Outcome.STOPPED),
    (None, 15, StopReason.TIMEOUT, S.TIMED_OUT, Outcome.TIMEOUT),
])
def test_exit_classification(code: int | None, sig: int | None, reason: StopReason | None,
                             state: State, outcome: Outcome) -> None:
    assert jm.exit_outcome(code, sig, reason) == (state, outcome)


def test_timeout_and_stop_ask_the_owner_to_stop_once_per_reason() -> None:
    job = in_state(S.RUNNING)
    assert job.handle(TimedOut(), 1.0, 99.0) == [Stop("job:abcd:7:1")]
    assert job.handle(TimedOut(), 1.0, 99.0) == []          # already being stopped
    assert job.handle(StopRequested(), 1.0, 99.0) == [Stop("job:abcd:7:1")]
    assert job.stop_reason is StopReason.TIMEOUT              # the first reason holds
    job.handle(Exited(None, 15), 2.0, 100.0)
    assert (job.state, job.outcome) == (S.TIMED_OUT, Outcome.TIMEOUT)


def test_an_exit_seen_before_the_launch_answer_ends_the_record() -> None:
    job = in_state(S.STARTING)
    job.handle(Exited(1, None, pid=55), 3.0, 3.0)
    assert (job.state, job.pid, job.exit_code) == (S.FAILED, 55, 1)
    job.handle(Launched(55, 550), 4.0, 4.0)      # the late answer: no new state, but it
    assert job.state is S.FAILED and job.ended_at == 3.0     # says when it started
    assert (job.start_ticks, job.started_at) == (550, 3.0)
    job.handle(Launched(56, 560), 5.0, 5.0)      # another process's answer changes nothing
    assert (job.pid, job.start_ticks, job.started_at) == (55, 550, 3.0)


def test_a_refused_launch_fails_with_its_reason() -> None:
    job = in_state(S.STARTING)
    job.handle(LaunchRefused("LAUNCH_FAILED", "no such file"), 3.0, 3.0)
    assert (job.state, job.outcome) == (S.FAILED, Outcome.LAUNCH_FAILED)
    assert job.evidence == {"launch_refused": {"code": "LAUNCH_FAILED", "msg": "no such file"}}


def test_recovery_required_never_starts_until_resolved_not_started_then_uses_a_new_key(
        ) -> None:
    job = in_state(S.RECOVERY_REQUIRED)
    assert job.evidence == {"why": "test"}
    assert job.handle(Start(PREFIX), 5.0, 5.0) == []           # no automatic replay
    assert job.handle(Launched(9, 90), 5.0, 5.0) == []        # nor adoption of a late proof
    assert job.state is S.RECOVERY_REQUIRED
    job.handle(Resolve(False, "not in the process list", "ops"), 6.0, 6.0)
    assert job.state is S.ADMITTED and job.launch_key is None
    assert job.resolution == {"started": False, "note": "not in the process list",
                              "by": "ops", "at": 6.0, "launch_key": "job:abcd:7:1",
                              "attempt": 1}
    assert job.handle(Start(PREFIX), 7.0, 7.0) == [Launch("job:abcd:7:2")]


def test_resolved_started_ends_the_record_for_good() -> None:
    job = in_state(S.RESOLVED)
    assert (job.outcome, job.resolution["started"]) == (Outcome.RESOLVED_STARTED, True)  # type: ignore[index]
    assert job.handle(Start(PREFIX), 5.0, 5.0) == [] and job.state is S.RESOLVED


def test_withdrawal_is_idempotent_and_refused_once_started() -> None:
    job = in_state(S.WITHDRAWN)
    job.handle(Withdraw(), 9.0, 9.0)                           # a retry after a lost answer
    assert job.state is S.WITHDRAWN and job.ended_at == 1000.0
    with pytest.raises(Conflict, match="use `tenure job stop`"):
        in_state(S.RUNNING).handle(Withdraw(), 1.0, 1.0)


def test_an_exit_heard_late_ends_the_record_at_the_exit_not_when_it_was_heard() -> None:
    """A backend that hears of an exit late (a crash, a blocked recovery) records the
    owner's time of the exit, and the start's when the owner said when it started."""
    job = Job(3, "s", "migrate", timeout=5.0)
    job.handle(Start(PREFIX), 100.0, 5.0)
    job.handle(Launched(42, 4200, at=99.5), 101.0, 6.0)
    assert (job.started_at, job.deadline) == (99.5, 6.0 - 1.5 + 5.0)  # from the start itself
    job.handle(Exited(0, None, at=101.5), 121.0, 26.0)                # heard 20 s later
    assert (job.state, job.ended_at) == (S.SUCCEEDED, 101.5)
    unknown = in_state(S.RUNNING)
    unknown.handle(Exited(0, None), 1234.0, 60.0)                     # no time: now
    assert unknown.ended_at == 1234.0
    skewed = in_state(S.RUNNING)                                      # started at 1000.0
    skewed.handle(Exited(0, None, at=999.0), 1001.0, 60.0)
    assert skewed.ended_at == 1000.0                                  # never before its start
    future = in_state(S.RUNNING)
    future.handle(Exited(0, None, at=5000.0), 1001.0, 60.0)
    assert future.ended_at == 1001.0                                  # nor after now


def test_a_start_heard_late_has_used_its_timeout_already() -> None:
    job = Job(3, "s", "migrate", timeout=5.0)
    job.handle(Start(PREFIX), 100.0, 5.0)
    job.handle(Launched(42, 4200, at=70.0), 133.0, 40.0)   # started 63 s ago
    assert job.started_at == 70.0 and job.deadline is not None and job.deadline < 40.0


def test_a_missed_record_keeps_the_reason_it_gives() -> None:
    job = Job(3, "s", "report")
    job.handle(Missed({"reason": "its key is held by another submission"}), 5.0, 5.0)
    assert (job.state, job.evidence) == (S.MISSED, {"reason": "its key is held by another "
                                                              "submission"})
    Job.from_wire(job.to_wire())


@pytest.mark.parametrize("started", [False, True])
def test_the_same_resolution_again_is_answered_and_another_is_refused(started: bool) -> None:
    """A retried resolve (its answer was lost) changes nothing; the other decision is
    a CONFLICT, as it was."""
    job = in_state(S.RECOVERY_REQUIRED)
    job.handle(Resolve(started, "checked", "ops"), 6.0, 6.0)
    if not started:
        job.handle(Start(PREFIX), 7.0, 7.0)          # it moved on: attempt 2 is starting
    before = job.to_wire()
    assert job.handle(Resolve(started, "checked", "ops"), 8.0, 8.0) == []
    assert job.to_wire() == before
    with pytest.raises(Conflict, match="only a recovery_required record can be resolved"):
        job.handle(Resolve(not started, "", "ops"), 9.0, 9.0)
    assert job.to_wire() == before


def test_the_owners_proof_settles_a_recovery_required_start_as_a_starting_one() -> None:
    """Was: nothing but the operator's Resolve left recovery_required, even once the
    owner showed the launch. The proof makes it running with the owner's pid, start ticks
    and time (its timeout counted from that start), its exit then ends it, and a resolve
    of it is refused naming the proof and how it ended."""
    job = in_state(S.RECOVERY_REQUIRED)
    proof = {"shows": "it is live in the owner's inventory"}
    assert job.handle(Proven("job:abcd:7:1", Launched(100, 1000, at=1990.0), proof,
                             "the backend (epoch 2)"), 2000.0, 60.0) == []
    assert (job.state, job.pid, job.start_ticks, job.started_at, job.deadline) == \
        (S.RUNNING, 100, 1000, 1990.0, 60.0 - 10.0 + 30.0)
    assert job.evidence == {"why": "test"}       # why it was uncertain stays
    assert job.resolution == {"started": True, "note": "", "by": "the backend (epoch 2)",
                              "at": 2000.0, "launch_key": "job:abcd:7:1", "attempt": 1,
                              "proof": proof}
    with pytest.raises(Conflict, match=r"job 7 \(s/migrate\) was settled from the owner's "
                       r"evidence: it started \(pid 100\) and is running"):
        job.handle(Resolve(True, "", "ops"), 2001.0, 61.0)
    job.handle(Exited(0, None, at=1995.0), 2002.0, 62.0)
    assert (job.state, job.outcome, job.ended_at) == (S.SUCCEEDED, Outcome.SUCCESS, 1995.0)
    before = job.to_wire()
    for started in (True, False):
        with pytest.raises(Conflict, match=r"evidence: it started \(pid 100\) and ended "
                           r"succeeded, success \(exit 0\); there is nothing left") as err:
            job.handle(Resolve(started, "", "ops"), 2003.0, 63.0)
        assert err.value.data == {"job": 7, "state": "succeeded", "outcome": "success"}
    assert job.to_wire() == before
    assert Job.from_wire(job.to_wire()).to_wire() == before


def test_the_owners_proof_of_a_refused_launch_fails_the_record() -> None:
    job = in_state(S.RECOVERY_REQUIRED)
    job.handle(Proven("job:abcd:7:1", LaunchRefused("LAUNCH_FAILED", "no such file"),
                      {"shows": "its launch was refused"}, "the backend"), 2000.0, 60.0)
    assert (job.state, job.outcome, job.pid) == (S.FAILED, Outcome.LAUNCH_FAILED, None)
    assert job.evidence == {"why": "test", "launch_refused": {"code": "LAUNCH_FAILED",
                                                              "msg": "no such file"}}
    assert job.resolution["started"] is False  # type: ignore[index]
    with pytest.raises(Conflict, match=r"its launch was refused \(LAUNCH_FAILED: no such "
                       r"file\), it ended failed, launch-failed"):
        job.handle(Resolve(False, "", "ops"), 2001.0, 61.0)


def test_a_proof_about_another_attempts_key_changes_nothing() -> None:
    job = in_state(S.RECOVERY_REQUIRED)
    before = job.to_wire()
    assert job.handle(Proven("job:abcd:7:2", Launched(100, 1000), {}, "b"), 2.0, 2.0) == []
    assert job.to_wire() == before


# ---- wire ---------------------------------------------------------------------------

@pytest.mark.parametrize("state", list(State))
def test_wire_round_trip(state: State) -> None:
    job = in_state(state)
    again = Job.from_wire(copy.deepcopy(job.to_wire()))
    assert again.to_wire() == job.to_wire()


def test_from_wire_ignores_extras_and_refuses_broken_invariants() -> None:
    wire = in_state(S.RUNNING).to_wire()
    assert Job.from_wire({**wire, "later": 1}).to_wire() == wire
    for change, field in [({"v": 2}, "v"), ({"pid": None}, "pid"),
                          ({"state": "stopping"}, "state"),
                          ({"outcome": "success"}, "outcome"),
                          ({"state": "admitted"}, "deadline"),
                          ({"launch_key": None}, "launch_key"),
                          ({"deadline": float("inf")}, "deadline"),
                          ({"id": 0}, "id"), ({"attempt": True}, "attempt"),
                          ({"started_at": 10**400}, "started_at"),   # past a float
                          ({"timeout": 10**400}, "timeout")]:
        with pytest.raises(BadRequest) as err:
            Job.from_wire({**wire, **change})
        assert err.value.data["field"] == field, change


# integers past a float's range too: JSON (backend.db) carries them, msgpack does not
_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6),
                    st.sampled_from([2**63, 10**400, -(10**400)]),
                    st.floats(allow_nan=True), st.text(max_size=8),
                    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_from_wire_fails_closed_on_any_mutation(data: st.DataObject) -> None:
    state = data.draw(st.sampled_from(list(State)))
    wire: dict[str, Any] = in_state(state).to_wire()
    for key in data.draw(st.lists(st.sampled_from(sorted(wire)), max_size=3)):
        if data.draw(st.booleans()):
            wire.pop(key, None)
        else:
            wire[key] = data.draw(_values)
    try:
        job = Job.from_wire(wire)
    except BadRequest:
        return
    assert Job.from_wire(job.to_wire()).to_wire() == job.to_wire()


@settings(max_examples=200, deadline=None)
@given(st.one_of(_values, st.lists(_values, max_size=3),
                 st.dictionaries(st.text(max_size=12), _values, max_size=8)))
def test_from_wire_refuses_anything_else_with_bad_request(obj: Any) -> None:
    with pytest.raises(BadRequest):
        Job.from_wire(obj)
