"""The life of one job record: a pure state machine with a complete transition table.

``Job.handle(event, wall, mono)`` applies one :data:`TRANSITIONS` cell and returns the
actions the runner must execute (launch, stop); a request that is not allowed in the
current state raises ``Conflict`` and changes nothing. Nothing here does I/O or reads a
clock: ``wall`` is ``time.time()`` (shown to people), ``mono`` is ``CLOCK_MONOTONIC``
(deadlines, meaningful to every process of one boot).

States (stable wire/SQLite values)::

    admitted           durably recorded; waits for its turn (max_concurrent, after apps)
    starting           one attempt reserved: launch key chosen, the owner asked to launch
    running            the owner runs it (pid and start ticks known)
    succeeded          it exited 0
    failed             non-zero exit, a signal, stopped, the launch refused, or lost
    timed_out          stopped because it ran longer than its timeout
    withdrawn          withdrawn before any start; never starts
    missed             a scheduled due time that passed while no backend was up
    recovery_required  a start whose outcome cannot be proven; waits for the operator
                       (or for the owner's proof of how it went)
    resolved           the operator recorded that the uncertain start did happen

Start authority is one-shot. ``Start`` is the only way into ``starting`` and only from
``admitted``; the launch key (derived from the record id and the attempt) is what the
owner makes unique forever, so a retried launch never starts a second process. Two
events leave ``recovery_required``: the operator's ``Resolve`` (``started`` ends the
record, ``not started`` returns it to ``admitted`` so the next attempt, with a new key,
may start) and ``Proven``, the owner's later proof of how that start went (its launch
makes the record ``running``, its refusal ``failed``; the backend then records the exit
it shows, if any). ``Proven`` only records what the owner did: it starts nothing, so the
start authority stays one-shot. An answer or observation that arrives after the record
moved on is ignored.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from msgspec import Struct

from protocol.errors import BadRequest, Conflict
from protocol.schema import Field, Schema, check_int

__all__ = [
    "OPEN", "TERMINAL", "TRANSITIONS", "Action", "Event", "Exited", "Job", "Launch",
    "LaunchRefused", "Launched", "Lost", "Missed", "Outcome", "Proven", "Resolve", "Start",
    "State", "Stop", "StopReason", "StopRequested", "TimedOut", "Uncertain", "Withdraw",
    "exit_outcome",
]

log = logging.getLogger("tenure.jobs")


class State(StrEnum):
    ADMITTED = "admitted"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    WITHDRAWN = "withdrawn"
    MISSED = "missed"
    RECOVERY_REQUIRED = "recovery_required"
    RESOLVED = "resolved"


OPEN = frozenset({State.ADMITTED, State.STARTING, State.RUNNING})
"""Records the runner drives."""
TERMINAL = frozenset({State.SUCCEEDED, State.FAILED, State.TIMED_OUT, State.WITHDRAWN,
                      State.MISSED, State.RESOLVED})
"""Records that never change again (only these are ever pruned)."""


class Outcome(StrEnum):
    """How a record ended; set exactly when it enters a terminal state."""

    SUCCESS = "success"
    EXIT_CODE = "exit-code"
    SIGNAL = "signal"
    TIMEOUT = "timeout"
    STOPPED = "stopped"
    LAUNCH_FAILED = "launch-failed"
    LOST = "lost"
    WITHDRAWN = "withdrawn"
    MISSED = "missed"
    RESOLVED_STARTED = "resolved-started"


class StopReason(StrEnum):
    REQUESTED = "requested"
    TIMEOUT = "timeout"


# ---- events -------------------------------------------------------------------------


class Start(Struct, frozen=True):
    """The runner's turn for this record. ``prefix`` makes the launch key unique to this
    ledger: ``<prefix>:<id>:<attempt>``."""

    prefix: str


class Launched(Struct, frozen=True):
    """``at``: when the owner started it (wall clock, the owner's row or observation),
    when known; else the record takes the time it is told."""

    pid: int
    start_ticks: int
    at: float | None = None


class LaunchRefused(Struct, frozen=True):
    """The owner answered that nothing was started (program missing, stack fenced...)."""

    code: str
    msg: str


class Exited(Struct, frozen=True):
    """``at``: when the process exited (the owner's ``exit`` observation or row), when
    known: a backend that hears of it later (a crash, a blocked recovery) still records
    the exit's own time, not its own."""

    exit_code: int | None
    signal: int | None
    pid: int | None = None
    at: float | None = None


class Lost(Struct, frozen=True):
    """It was started, and it is gone with an exit nobody can tell."""

    evidence: dict[str, Any]


class Uncertain(Struct, frozen=True):
    """Whether the start happened cannot be proven."""

    evidence: dict[str, Any]


class Withdraw(Struct, frozen=True):
    pass


class Missed(Struct, frozen=True):
    """A scheduled due time passed while no backend was up and its template does not
    catch up (or it could not be admitted at all: ``evidence`` says why): the record is
    kept to say so, and never starts."""

    evidence: dict[str, Any] | None = None


class StopRequested(Struct, frozen=True):
    pass


class TimedOut(Struct, frozen=True):
    pass


class Resolve(Struct, frozen=True):
    """The operator's decision about a ``recovery_required`` start."""

    started: bool
    note: str = ""
    by: str = ""


class Proven(Struct, frozen=True):
    """The owner shows how the start of a ``recovery_required`` record went: ``start`` is
    what it shows for ``launch_key`` (the launch, or its refusal), ``proof`` that evidence
    (kept in the record's resolution). ``by`` and ``note`` say who settled it: the backend
    that found the proof, or the operator whose resolve found it."""

    launch_key: str
    start: Launched | LaunchRefused
    proof: dict[str, Any]
    by: str
    note: str = ""


Event = (Start | Launched | LaunchRefused | Exited | Lost | Uncertain | Withdraw | Missed
         | StopRequested | TimedOut | Resolve | Proven)
EVENT_TYPES: tuple[type[Event], ...] = (Start, Launched, LaunchRefused, Exited, Lost,
                                       Uncertain, Withdraw, Missed, StopRequested, TimedOut,
                                       Resolve, Proven)

# ---- actions ------------------------------------------------------------------------


class Launch(Struct, frozen=True):
    launch_key: str


class Stop(Struct, frozen=True):
    launch_key: str


Action = Launch | Stop
Handler = Callable[["Job", Any, float, float], None]


class Job:
    """One record. Invariants: only ``_set_state`` assigns ``state``; ``launch_key`` is
    set from ``starting`` on (and kept as evidence); ``pid`` is set while ``running``;
    ``outcome`` and ``ended_at`` are set exactly in the terminal states; ``attempt``
    only grows; ``resolution`` is set only as a record leaves ``recovery_required``, and
    has ``proof`` exactly when the owner's evidence settled it (``Proven``)."""

    def __init__(self, job_id: int, stack: str, template: str,
                 timeout: float | None = None) -> None:
        self.id = job_id
        self.stack = stack
        self.template = template
        self.timeout = timeout
        self.state: State
        self._set_state(State.ADMITTED, 0.0, restore=True)
        self.attempt = 0
        self.launch_key: str | None = None
        self.pid: int | None = None
        self.start_ticks: int | None = None
        self.started_at: float | None = None     # wall clock, when the owner launched it
        self.ended_at: float | None = None       # wall clock, when it became terminal
        self.deadline: float | None = None       # CLOCK_MONOTONIC, while running
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.outcome: Outcome | None = None
        self.stop_reason: StopReason | None = None
        self.evidence: dict[str, Any] | None = None
        self.resolution: dict[str, Any] | None = None
        self._out: list[Action] = []

    @property
    def name(self) -> str:
        return f"job {self.id} ({self.stack}/{self.template})"

    def handle(self, event: Event, wall: float, mono: float) -> list[Action]:
        """Apply the table cell for (state, type(event)); return the actions to execute.
        Raises Conflict (nothing changed) for a request the state does not allow, and
        KeyError only for an object that is not an :data:`Event`."""
        self._out = []
        TRANSITIONS[(self.state, type(event))](self, event, wall, mono)
        out, self._out = self._out, []
        return out

    # ---- the only state assignment ----------------------------------------------------

    def _set_state(self, new: State, wall: float, outcome: Outcome | None = None, *,
                   restore: bool = False) -> None:
        """Leaving ``running`` drops its deadline; entering a terminal state records the
        outcome and the end time once; returning to ``admitted`` forgets the process of
        the previous attempt (its launch key stays in the history and the evidence).
        ``restore`` sets the state of a fresh or deserialised record without effects."""
        if restore:
            self.state = new
            return
        old = self.state
        if old is State.RUNNING and new is not State.RUNNING:
            self.deadline = None
        if new in TERMINAL:
            assert outcome is not None, f"{new} needs an outcome"
            self.outcome = outcome
            if self.ended_at is None:
                self.ended_at = wall
        if new is State.ADMITTED:
            self.launch_key = self.pid = self.start_ticks = None
            self.stop_reason = None
        self.state = new
        log.debug("%s: %s -> %s", self.name, old, new)

    # ---- wire -------------------------------------------------------------------------

    def to_wire(self) -> dict[str, Any]:
        return {
            "v": WIRE_VERSION, "id": self.id, "stack": self.stack,
            "template": self.template, "state": self.state.value, "attempt": self.attempt,
            "launch_key": self.launch_key, "pid": self.pid, "start_ticks": self.start_ticks,
            "started_at": self.started_at, "ended_at": self.ended_at,
            "deadline": self.deadline, "timeout": self.timeout,
            "exit_code": self.exit_code, "signal": self.signal,
            "outcome": None if self.outcome is None else self.outcome.value,
            "stop_reason": None if self.stop_reason is None else self.stop_reason.value,
            "evidence": self.evidence, "resolution": self.resolution,
        }

    @classmethod
    def from_wire(cls, data: Any) -> Job:
        """Restore from ``to_wire`` output. Strict about required fields and the class
        invariants, forgiving about extra keys. Raises BadRequest."""
        d = _WIRE.validate(data, "job")
        if d["v"] != WIRE_VERSION:
            raise BadRequest(f"job.v {d['v']} is not {WIRE_VERSION}", {"field": "v"})
        job = cls(d["id"], d["stack"], d["template"], d["timeout"])
        job._set_state(State(d["state"]), 0.0, restore=True)
        job.attempt, job.launch_key = d["attempt"], d["launch_key"]
        job.pid, job.start_ticks = d["pid"], d["start_ticks"]
        job.started_at, job.ended_at, job.deadline = (d["started_at"], d["ended_at"],
                                                      d["deadline"])
        job.exit_code, job.signal = d["exit_code"], d["signal"]
        job.outcome = None if d["outcome"] is None else Outcome(d["outcome"])
        job.stop_reason = None if d["stop_reason"] is None else StopReason(d["stop_reason"])
        job.evidence, job.resolution = d["evidence"], d["resolution"]
        _check_consistent(job)
        return job


def exit_outcome(exit_code: int | None, signal: int | None,
                 stop_reason: StopReason | None) -> tuple[State, Outcome]:
    """How an exit ends a record: a stop this backend made wins (timeout, requested),
    then a signal; code 0 is success."""
    if stop_reason is StopReason.TIMEOUT:
        return State.TIMED_OUT, Outcome.TIMEOUT
    if stop_reason is StopReason.REQUESTED:
        return State.FAILED, Outcome.STOPPED
    if signal:
        return State.FAILED, Outcome.SIGNAL
    return (State.SUCCEEDED, Outcome.SUCCESS) if exit_code == 0 else \
        (State.FAILED, Outcome.EXIT_CODE)


# ---- handlers ---------------------------------------------------------------------------
# Each takes (job, event, wall, mono). ``_ignore`` is for answers and observations that
# come after the record moved on; ``_rejects(why)`` builds the refusal of a request.


def _ignore(job: Job, ev: Any, wall: float, mono: float) -> None:
    log.debug("%s: %s ignored in state %s", job.name, type(ev).__name__, job.state)


def _rejects(why: str) -> Handler:
    def reject(job: Job, ev: Any, wall: float, mono: float) -> None:
        raise Conflict(f"{job.name} is {job.state}: {why}",
                       {"job": job.id, "state": job.state.value})
    return reject


def _start(job: Job, ev: Start, wall: float, mono: float) -> None:
    job.attempt += 1
    job.launch_key = f"{ev.prefix}:{job.id}:{job.attempt}"
    job._set_state(State.STARTING, wall)
    job._out.append(Launch(job.launch_key))


def _launched(job: Job, ev: Launched, wall: float, mono: float) -> None:
    """The deadline counts from the start itself: a start heard of late (a generation
    that settled it from evidence) has already used part of its timeout."""
    started = _when(ev.at, wall)
    job.pid, job.start_ticks, job.started_at = ev.pid, ev.start_ticks, started
    job.deadline = None if job.timeout is None else mono - (wall - started) + job.timeout
    job._set_state(State.RUNNING, wall)


def _when(at: float | None, wall: float) -> float:
    """When something the owner observed happened: its own time, never later than now
    (``wall``) when it is told; now when it is unknown."""
    return wall if at is None or not math.isfinite(at) else min(at, wall)


def _late_launched(job: Job, ev: Launched, wall: float, mono: float) -> None:
    """The launch answer came after the exit it led to (a process that ended at once):
    it says when the process started; the record stays ended."""
    if job.started_at is None and job.pid in (None, ev.pid):
        job.pid, job.start_ticks = ev.pid, ev.start_ticks
        job.started_at = min(_when(ev.at, wall), job.ended_at or wall)


def _refused(job: Job, ev: LaunchRefused, wall: float, mono: float) -> None:
    job.evidence = {"launch_refused": {"code": ev.code, "msg": ev.msg}}
    job._set_state(State.FAILED, wall, Outcome.LAUNCH_FAILED)


def _exited(job: Job, ev: Exited, wall: float, mono: float) -> None:
    if job.pid is None and ev.pid is not None:
        job.pid = ev.pid  # the exit was seen before the launch answer
    job.exit_code, job.signal = ev.exit_code, ev.signal
    state, outcome = exit_outcome(ev.exit_code, ev.signal, job.stop_reason)
    ended = _when(ev.at, wall)
    if job.started_at is not None:
        ended = max(ended, job.started_at)   # two clocks' readings: never before its start
    job._set_state(state, ended, outcome)


def _lost(job: Job, ev: Lost, wall: float, mono: float) -> None:
    job.evidence = ev.evidence
    job._set_state(State.FAILED, wall, Outcome.LOST)


def _uncertain(job: Job, ev: Uncertain, wall: float, mono: float) -> None:
    job.evidence = ev.evidence
    job._set_state(State.RECOVERY_REQUIRED, wall)


def _withdraw(job: Job, ev: Withdraw, wall: float, mono: float) -> None:
    job._set_state(State.WITHDRAWN, wall, Outcome.WITHDRAWN)


def _missed(job: Job, ev: Missed, wall: float, mono: float) -> None:
    if ev.evidence is not None:
        job.evidence = ev.evidence
    job._set_state(State.MISSED, wall, Outcome.MISSED)


def _stop(job: Job, ev: StopRequested, wall: float, mono: float) -> None:
    assert job.launch_key is not None
    if job.stop_reason is None:
        job.stop_reason = StopReason.REQUESTED
    job._out.append(Stop(job.launch_key))  # again if asked again: stop is idempotent


def _timed_out(job: Job, ev: TimedOut, wall: float, mono: float) -> None:
    assert job.launch_key is not None
    if job.stop_reason is not None:
        return  # already being stopped
    job.stop_reason = StopReason.TIMEOUT
    job._out.append(Stop(job.launch_key))


def _resolve(job: Job, ev: Resolve, wall: float, mono: float) -> None:
    job.resolution = {"started": ev.started, "note": ev.note, "by": ev.by, "at": wall,
                      "launch_key": job.launch_key, "attempt": job.attempt}
    if ev.started:
        job._set_state(State.RESOLVED, wall, Outcome.RESOLVED_STARTED)
    else:
        job._set_state(State.ADMITTED, wall)


def _resolve_again(job: Job, ev: Resolve, wall: float, mono: float) -> None:
    """A record that is not ``recovery_required``: one settled from the owner's evidence
    is refused, saying so and how it stands (no decision is left to make); otherwise the
    same decision as the one it carries is a retry (its answer was lost) and changes
    nothing, and any other is refused. Raises Conflict."""
    if job.resolution is not None and "proof" in job.resolution:
        raise Conflict(f"{job.name} was settled from the owner's evidence: {_settled(job)}; "
                       "there is nothing left to resolve",
                       {"job": job.id, "state": job.state.value,
                        "outcome": None if job.outcome is None else job.outcome.value})
    if job.resolution is not None and job.resolution.get("started") == ev.started:
        log.debug("%s: resolve (started=%s) again: already so", job.name, ev.started)
        return
    raise Conflict(f"{job.name} is {job.state}: only a recovery_required record can be "
                   "resolved", {"job": job.id, "state": job.state.value})


def _proven(job: Job, ev: Proven, wall: float, mono: float) -> None:
    """The owner proves how the uncertain start went: the record goes on from that proof
    exactly as a ``starting`` one would (``running`` with the pid, start ticks and time,
    or ``failed`` with the refusal, keeping the evidence of the uncertainty), and its
    resolution says it was settled from the owner's evidence, not decided. A proof about
    another attempt's launch key says nothing about this one and is ignored."""
    if ev.launch_key != job.launch_key:
        _ignore(job, ev, wall, mono)
        return
    job.resolution = {"started": isinstance(ev.start, Launched), "note": ev.note,
                      "by": ev.by, "at": wall, "launch_key": job.launch_key,
                      "attempt": job.attempt, "proof": ev.proof}
    if isinstance(ev.start, Launched):
        _launched(job, ev.start, wall, mono)
        return
    refused = {"code": ev.start.code, "msg": ev.start.msg}
    job.evidence = {**(job.evidence or {}), "launch_refused": refused}
    job._set_state(State.FAILED, wall, Outcome.LAUNCH_FAILED)


def _settled(job: Job) -> str:
    """How a record settled from the owner's evidence stands, in an operator's words."""
    if job.outcome is Outcome.LAUNCH_FAILED:
        refused = (job.evidence or {}).get("launch_refused") or {}
        return (f"its launch was refused ({refused.get('code')}: {refused.get('msg')}), "
                f"it ended {job.state}, {job.outcome}")
    if job.state is State.RUNNING:
        return f"it started (pid {job.pid}) and is running"
    if job.signal:
        end = f"signal {job.signal}"
    else:
        end = "exit unknown" if job.exit_code is None else f"exit {job.exit_code}"
    return f"it started (pid {job.pid}) and ended {job.state}, {job.outcome} ({end})"


# ---- the table --------------------------------------------------------------------------
# One row per event, one cell per state, in State order:
#   admitted, starting, running, succeeded, failed, timed_out, withdrawn, missed,
#   recovery_required, resolved
_I = _ignore
_ENDED = _rejects("it has ended")
_RECOVERY = _rejects("its start is uncertain; run `tenure job resolve` first")
_STARTED = _rejects("it has started; use `tenure job stop`")
_ROWS: dict[type[Event], tuple[Handler, ...]] = {
    Start: (_start, _I, _I, _I, _I, _I, _I, _I, _I, _I),
    Launched: (_I, _launched, _I, _late_launched, _late_launched, _I, _I, _I, _I, _I),
    LaunchRefused: (_I, _refused, _I, _I, _I, _I, _I, _I, _I, _I),
    Exited: (_I, _exited, _exited, _I, _I, _I, _I, _I, _I, _I),
    Lost: (_I, _lost, _lost, _I, _I, _I, _I, _I, _I, _I),
    Uncertain: (_I, _uncertain, _I, _I, _I, _I, _I, _I, _I, _I),
    Withdraw: (_withdraw, _STARTED, _STARTED, _ENDED, _ENDED, _ENDED, _I, _ENDED,
               _RECOVERY, _ENDED),
    Missed: (_missed, _I, _I, _I, _I, _I, _I, _I, _I, _I),
    StopRequested: (_rejects("it has not started; use `tenure job withdraw`"),
                    _rejects("its start is in progress; try again in a moment"), _stop,
                    _ENDED, _ENDED, _ENDED, _ENDED, _ENDED, _RECOVERY, _ENDED),
    TimedOut: (_I, _I, _timed_out, _I, _I, _I, _I, _I, _I, _I),
    Resolve: (*[_resolve_again] * 8, _resolve, _resolve_again),
    Proven: (_I, _I, _I, _I, _I, _I, _I, _I, _proven, _I),
}
assert all(len(row) == len(State) for row in _ROWS.values())
assert set(_ROWS) == set(EVENT_TYPES)

TRANSITIONS: dict[tuple[State, type[Event]], Handler] = {
    (state, event): row[i] for event, row in _ROWS.items() for i, state in enumerate(State)
}

# ---- wire -------------------------------------------------------------------------------

WIRE_VERSION = 1


def _enum(enum: type[StrEnum]) -> Callable[[Any], str | None]:
    values = {m.value for m in enum}
    return lambda v: None if v in values else f"must be one of {sorted(values)}"


def _finite(v: Any) -> str | None:
    return None if math.isfinite(v) else "must be finite"


def _opt_time(name: str) -> Field:
    return Field(name, float, required=False, check=_finite)


_WIRE = Schema(
    Field("v", int), Field("id", int, check=check_int(1)),
    Field("stack", str), Field("template", str),
    Field("state", str, check=_enum(State)),
    Field("attempt", int, check=check_int(0)),
    Field("launch_key", str, required=False),
    Field("pid", int, required=False, check=check_int(1)),
    Field("start_ticks", int, required=False, check=check_int(0)),
    _opt_time("started_at"), _opt_time("ended_at"), _opt_time("deadline"),
    Field("timeout", float, required=False, check=lambda v: None if math.isfinite(v)
          and v > 0 else "must be a finite number > 0"),
    Field("exit_code", int, required=False), Field("signal", int, required=False),
    Field("outcome", str, required=False, check=_enum(Outcome)),
    Field("stop_reason", str, required=False, check=_enum(StopReason)),
    Field("evidence", dict, required=False), Field("resolution", dict, required=False),
)


def _check_consistent(job: Job) -> None:
    """Raises BadRequest when the restored fields break a class invariant."""
    def bad(msg: str, field: str) -> BadRequest:
        return BadRequest(f"job {job.id} {msg}", {"field": field})
    if job.state in (State.STARTING, State.RUNNING, State.RECOVERY_REQUIRED) and (
            job.launch_key is None or job.attempt < 1):
        raise bad(f"in state {job.state} needs a launch key and an attempt", "launch_key")
    if job.state is State.RUNNING and (job.pid is None or job.start_ticks is None):
        raise bad("in state running needs a pid and start ticks", "pid")
    if (job.state in TERMINAL) != (job.outcome is not None):
        raise bad(f"in state {job.state} cannot have outcome {job.outcome}", "outcome")
    if (job.state in TERMINAL) != (job.ended_at is not None):
        raise bad(f"in state {job.state} cannot have ended_at {job.ended_at}", "ended_at")
    if job.deadline is not None and job.state is not State.RUNNING:
        raise bad("has a deadline outside state running", "deadline")
    if job.state is State.ADMITTED and (job.launch_key is not None or job.pid is not None):
        raise bad("in state admitted cannot name a launch", "launch_key")
