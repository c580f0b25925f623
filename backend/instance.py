"""The life of one app instance: a pure state machine with a complete transition table.

``Instance.handle(event, now)`` applies one :data:`TRANSITIONS` cell and returns the
actions the reconciler must execute (launch, stop, timers, probes, reports). Nothing here
does I/O or reads a clock: ``now`` is a ``CLOCK_MONOTONIC`` reading supplied by the caller
(system-wide within one boot, so a checkpoint's absolute deadlines stay meaningful for the
next backend generation on the same boot).

Detailed states (stable wire/SQLite values) and their public names::

    stopped     not running, not wanted                          -> stopped
    starting    Launch issued, awaiting the owner's answer       -> starting
    running     process up, readiness pending                    -> running
    ready       process up and ready (health checks run here)    -> ready
    stopping    Stop issued because the operator asked           -> stopping
    restarting  Stop issued by policy (readiness timeout, health) -> stopping
    backoff     waiting for the backoff timer before relaunching -> backoff
    failed      given up: start limit hit, or a failure with restart=never -> failed
    exited      the process ended and the policy says leave it   -> stopped

Contract with the reconciler (which owns all I/O):

- Events are fed one at a time, already filtered to the current ``generation``; a stale
  event from an older launch must not be fed.
- ``Stop`` is always answered with ``Stopped`` once the owner confirms the process (and its
  group) is gone, including "it was already gone". ``Exited`` during a stop is recorded but
  the machine waits for ``Stopped``.
- An exit the owner reports as its own stop (``stopped``) is fed as ``OwnerStopped``: the
  machine ignores it where this backend asked for the stop, as it ignores ``Exited``.
- Timers are named (:class:`Timer`); when one fires, feed ``TIMER_EVENTS[name]``.
- ``StartReadiness`` for ``notify`` means "wait for READY=1 from the owner's notify stream
  and feed ``Ready``"; for tcp/http/exec it means "run a ``probes.ProbeRunner``". The
  readiness deadline is the machine's own ``ready-timeout`` timer.
- After ``from_wire`` the reconciler calls ``resume(now)`` to re-arm timers and probes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from . import instance_wire
from .explain import LastError, LastExit, LastProbe
from .instance_types import (  # the machine's vocabulary, re-exported
    EVENT_TYPES,
    EXIT_REASON,
    PUBLIC_STATE,
    TIMER_EVENTS,
    Action,
    Adopt,
    BackoffElapsed,
    CancelTimer,
    Event,
    Exited,
    ExitReason,
    HealthFailed,
    HealthOk,
    Launch,
    Launched,
    LaunchFailed,
    Outcome,
    OwnerStopped,
    Probed,
    PublicState,
    Ready,
    ReadyTimeout,
    Report,
    Start,
    StartHealth,
    StartReadiness,
    StartTimer,
    State,
    Stop,
    StopHealth,
    Stopped,
    StopReadiness,
    StopRequested,
    Timer,
)
from .model import App, ReadyKind, RestartMode

__all__ = [
    "PUBLIC_STATE", "TIMER_EVENTS", "TRANSITIONS", "Action", "Adopt", "BackoffElapsed",
    "CancelTimer", "Event", "Exited", "HealthFailed", "HealthOk", "Instance", "Launch",
    "LaunchFailed", "Launched", "Outcome", "OwnerStopped", "Probed", "PublicState", "Ready",
    "ReadyTimeout", "Report",
    "Start", "StartHealth", "StartReadiness", "StartTimer", "State", "Stop", "StopHealth",
    "StopReadiness", "StopRequested", "Stopped", "Timer", "exit_outcome",
]

log = logging.getLogger(__name__)

Handler = Callable[["Instance", Event, float], None]

_UP = frozenset({State.STARTING, State.RUNNING, State.READY})


class Instance:
    """One app instance. Invariants: only ``_set_state`` assigns ``state``; every timer in
    ``timers`` belongs to the current state (leaving a state cancels them); ``pid`` is set
    in ``running`` and ``ready``; ``restarts`` only grows."""

    def __init__(self, app: App, index: int = 0, generation: int = 0) -> None:
        """``generation``: the last one a removed instance of the same key launched (its
        launch keys are spent); this one's first launch is the next."""
        self.app = app
        self.index = index
        self.state: State
        self._set_state(State.STOPPED, 0.0, restore=True)
        self.generation = generation
        self.base_generation = generation        # launches up to it were a predecessor's
        self.restarts = 0
        self.ready_count = 0     # times it became ready in this generation of the backend
        self.exits: dict[ExitReason, int] = {}    # processes ended, by reason; only grows
        self.streak = 0                          # consecutive failed runs, drives backoff
        self.last_outcome: Outcome | None = None
        self.pending_outcome: Outcome | None = None  # why we are in ``restarting``
        self.gave_up_after: Outcome | None = None    # the last run's, once the limit hit
        self.pid: int | None = None
        self.start_ticks: int | None = None
        self.launched_at: float | None = None    # when the current process came up
        # READY=1 of the current launch came before the launch's answer (_ready_early);
        # not saved: a generation that ends in between drains its launches first
        self.ready_told = False
        self.starts: list[float] = []            # launch times inside the start-limit window
        self.saved_boot: str | None = None       # the boot its saved state was written in
        self.health_failures = 0
        self.timers: dict[Timer, float] = {}     # absolute deadlines
        # why it is where it is (backend.explain), each naming its generation
        self.last_error: LastError | None = None
        self.last_exit: LastExit | None = None
        self.last_probe: LastProbe | None = None
        self._out: list[Action] = []

    # ---- public ---------------------------------------------------------------------

    @property
    def public_state(self) -> PublicState:
        return PUBLIC_STATE[self.state]

    @property
    def launch_key(self) -> str:
        return f"{self.app.stack}/{self.app.name}/{self.index}/{self.generation}"

    def handle(self, event: Event, now: float) -> list[Action]:
        """Apply the table cell for (state, type(event)); return the actions to execute.
        Raises KeyError only for an object that is not an :data:`Event`."""
        self._out = []
        handler = TRANSITIONS[(self.state, type(event))]
        handler(self, event, now)
        out, self._out = self._out, []
        return out

    def resume(self, now: float) -> list[Action]:
        """Actions that re-establish side effects after ``from_wire``: timers re-armed
        from their absolute deadlines (overdue ones fire at once; none waits longer than
        its own length, :meth:`_longest`), probes restarted.

        Deadlines and start times are CLOCK_MONOTONIC readings, which count from the
        boot: saved in another boot (backend.db read after a reboot), they mean nothing
        here. There an instance in backoff waited for about as long as the last boot
        had run, and its old starts counted in the start-limit window as long; now its
        timers fire at once and its starts are forgotten. Times after ``now`` cannot be
        of this boot either, and are dropped."""
        if self.saved_boot is not None and self.saved_boot != instance_wire.this_boot():
            self.starts = []
            self.timers = dict.fromkeys(self.timers, now)
        self.saved_boot = None   # its times are this boot's now: a later resume (after
        # an aborted handoff) must not take them for the last boot's again
        self.starts = [t for t in self.starts if t <= now]
        out: list[Action] = [StartTimer(name, min(max(0.0, deadline - now), self._longest(name)))
                             for name, deadline in sorted(self.timers.items())]
        if self.state is State.RUNNING and self.app.ready.kind is not ReadyKind.DELAY:
            out.append(StartReadiness())
        if self.state is State.READY and self.app.health is not None:
            out.append(StartHealth())
        return out

    def _longest(self, name: Timer) -> float:
        """The longest timer ``name`` can run under this instance's app."""
        if name is Timer.BACKOFF:
            return max(self.app.backoff.max, self.app.backoff.initial)
        return self.app.ready.timeout if name is Timer.READY_TIMEOUT else self.app.ready.delay

    @property
    def started(self) -> bool:
        """Whether this instance was ever launched (or adopted running)."""
        return self.generation > self.base_generation or self.state is not State.STOPPED

    def take_app(self, app: App, now: float) -> list[Action]:
        """Run on ``app`` from now on (its definition is this process's; a policy may
        differ), which takes effect at once: a ready instance's health check is stopped,
        replaced or started as ``app.health`` says; one in backoff waits as the new
        ``backoff`` says from when it began, or settles, as the run that ended would
        have under ``app`` (:meth:`_rewait`)."""
        old, self.app = self.app, app
        if self.state is State.BACKOFF:
            self._out = []
            self._rewait(old, now)
            out, self._out = self._out, []
            return out
        if self.state is not State.READY or app.health == old.health:
            return []
        self.health_failures = 0
        return [StopHealth(), *([StartHealth()] if app.health is not None else [])]

    def _rewait(self, old: App, now: float) -> None:
        """In backoff, after the policy changed from ``old``: settle when the new one
        does not restart after the run that ended (exited, or failed when it never came
        up), give up when the start limit refuses the relaunch, else wait the new
        delay, counted from when the backoff began."""
        outcome = self.last_outcome or Outcome.EXIT_CODE
        if not self._wants_restart(outcome):
            exited = outcome in (Outcome.SUCCESS, Outcome.EXIT_CODE, Outcome.SIGNAL)
            self._set_state(State.EXITED if exited else State.FAILED, now)
            return
        began = self.timers[Timer.BACKOFF] - old.backoff.delay(self.streak)
        due = max(now, began + self.app.backoff.delay(self.streak))
        if self._limit_reached(due):
            self._give_up(now)
            return
        if abs(due - self.timers[Timer.BACKOFF]) > 1e-6:   # else: the same wait
            self._start_timer(Timer.BACKOFF, due - now, now)

    def to_wire(self) -> dict[str, Any]:
        """A plain msgpack/JSON-able map; timers as absolute deadlines."""
        return instance_wire.to_wire(self)

    @classmethod
    def from_wire(cls, data: Any, app: App) -> Instance:
        """Restore from ``to_wire`` output. Strict about identity and required fields,
        forgiving about extra keys. Raises protocol.errors.BadRequest for a missing,
        mistyped or inconsistent field, an unknown version, or a stack/app that does not
        match ``app``. Keeps the class invariants (timers belong to the state, pid set
        while up)."""
        d = instance_wire.read(data, app)
        inst = cls(app, d["instance"])
        inst._set_state(State(d["state"]), 0.0, restore=True)
        instance_wire.restore(inst, d)
        return inst

    # ---- the only state assignment ----------------------------------------------------

    def _set_state(self, new: State, now: float, *, restore: bool = False) -> None:
        """The only assignment of ``state``. Leaving a state cancels its timers and
        probes; entering ``running``/``ready`` starts readiness/health. ``restore`` sets
        the state of a fresh or deserialised instance without side effects."""
        if restore:
            self.state = new
            return
        old = self.state
        if new is old:
            return
        for name in sorted(self.timers):
            self._out.append(CancelTimer(name))
        self.timers.clear()
        if old is State.RUNNING and self.app.ready.kind is not ReadyKind.DELAY:
            self._out.append(StopReadiness())
        if old is State.READY:
            self.health_failures = 0
            self._out.append(StopHealth())   # whatever the app says now: none may outlive it
        if new not in _UP and new not in (State.STOPPING, State.RESTARTING):
            self.pid = self.start_ticks = self.launched_at = None
        if new is not State.RESTARTING:
            self.pending_outcome = None
        if new is not State.FAILED:
            self.gave_up_after = None
        self.state = new
        log.debug("%s: %s -> %s", self.launch_key, old, new)
        if new is State.READY:
            self.ready_count += 1
        if new is State.RUNNING:
            self._enter_running(now)
        elif new is State.READY and self.app.health is not None:
            self._out.append(StartHealth())

    def _enter_running(self, now: float) -> None:
        ready = self.app.ready
        if ready.kind is ReadyKind.DELAY:
            self._start_timer(Timer.READY_DELAY, ready.delay, now)
        else:
            self._out.append(StartReadiness())
            self._start_timer(Timer.READY_TIMEOUT, ready.timeout, now)

    def _start_timer(self, name: Timer, delay: float, now: float) -> None:
        self.timers[name] = now + delay
        self._out.append(StartTimer(name, delay))

    # ---- helpers used by handlers -----------------------------------------------------

    def _report(self, outcome: Outcome) -> None:
        self.last_outcome = outcome
        self._out.append(Report(outcome))

    def count_exit(self, reason: ExitReason) -> None:
        self.exits[reason] = self.exits.get(reason, 0) + 1

    def carry(self, old: Instance) -> None:
        """Take over ``old``'s counters (a fresh instance for the same app instance)."""
        self.generation, self.restarts = old.generation, old.restarts
        self.base_generation = old.base_generation
        self.exits = dict(old.exits)

    def _wants_restart(self, outcome: Outcome) -> bool:
        mode = self.app.restart
        if mode is RestartMode.ALWAYS:
            return True
        return mode is RestartMode.ON_FAILURE and outcome is not Outcome.SUCCESS

    def _launch(self, now: float, *, counted: bool = True) -> None:
        """Launch a new generation unless the start limit forbids it (-> failed).
        ``counted=False``: a launch the app's behaviour did not cause (after the owner
        stopped it on its own), which is no restart and takes no start-limit slot."""
        if counted:
            self.starts = [t for t in self.starts if t > now - self.app.start_limit.interval]
            if self._limit_reached(now):
                self._give_up(now)
                return
            self.starts.append(now)
            if self.generation > self.base_generation:   # not this instance's first launch
                self.restarts += 1
        self.generation += 1
        self.ready_told = False
        self._set_state(State.STARTING, now)
        self._out.append(Launch(self.generation, self.launch_key))

    def _after_failure(self, outcome: Outcome, now: float, *, exited: bool) -> None:
        """A run ended (or never came up) with ``outcome``: back off, or settle."""
        if not self._wants_restart(outcome):
            final = State.EXITED if exited else State.FAILED
            self._set_state(final, now)
            return
        if self.launched_at is not None and now - self.launched_at >= \
                self.app.backoff.reset_after and outcome is not Outcome.TIMEOUT:
            # A stable run ends the crash loop: a new backoff streak and a new start-limit
            # window, so an app that crashes now and then is never given up on. One that
            # never became ready was not up, however long it waited (with the defaults,
            # a 30 s ready timeout, every such run was stable: no backoff, no limit).
            self.streak = 0
            self.starts = []
        self.streak += 1
        # The first failure after a stable run restarts at once (most crashes are one-off);
        # consecutive failures then wait initial, initial*factor, ... up to max.
        delay = self.app.backoff.delay(self.streak)
        if self._limit_reached(now + delay):   # the restart would be refused: no backoff
            self._give_up(now)                 # that says "next start in ..." of none
            return
        self._set_state(State.BACKOFF, now)
        self._start_timer(Timer.BACKOFF, delay, now)

    def _limit_reached(self, at: float) -> bool:
        """Whether a start at ``at`` would pass the start limit: ``burst`` starts
        already within the ``interval`` before it."""
        limit = self.app.start_limit
        return sum(t > at - limit.interval for t in self.starts) >= limit.burst

    def _give_up(self, now: float) -> None:
        self._set_state(State.FAILED, now)
        self.gave_up_after = self.last_outcome
        self._report(Outcome.START_LIMIT_HIT)

    def _stop(self, state: State, now: float) -> None:
        self._set_state(state, now)
        self._out.append(Stop(self.generation, self.launch_key))


def exit_outcome(exit_code: int | None, signal: int | None) -> Outcome:
    """Classify an exit status: a signal wins over a code; code 0 is success."""
    if signal:
        return Outcome.SIGNAL
    return Outcome.SUCCESS if exit_code == 0 else Outcome.EXIT_CODE


# ---- handlers ---------------------------------------------------------------------------
# Each takes (instance, event, now). ``_ignore`` is for stale or idempotent events,
# ``_reject`` for events that are not meaningful in the state (logged, no effect).


def _ignore(inst: Instance, ev: Event, now: float) -> None:
    pass


def _reject(inst: Instance, ev: Event, now: float) -> None:
    log.debug("%s: %s ignored in state %s", inst.launch_key, type(ev).__name__, inst.state)


def _start_fresh(inst: Instance, ev: Event, now: float) -> None:
    # An explicit start (an operator's start or restart, an apply) opens a new start-limit
    # window and a new streak: the limit guards against crash loops, and a person who
    # restarts an app five times in a minute is not one. After ``failed`` it is the
    # operator's "reset-failed".
    inst.starts = []
    inst.streak = 0
    inst._launch(now)


_start_after_failed = _start_fresh
# In backoff too: the operator's start launches now (leaving backoff cancels its timer)
# in a new window, rather than wait out the delay for a launch the limit may refuse.
_start_from_backoff = _start_fresh


def _stop_running(inst: Instance, ev: Event, now: float) -> None:
    inst._stop(State.STOPPING, now)


def _settle_stopped(inst: Instance, ev: Event, now: float) -> None:
    inst._set_state(State.STOPPED, now)


def _escalate_to_stopping(inst: Instance, ev: Event, now: float) -> None:
    # A Stop is already in flight; it now ends in ``stopped`` instead of a restart.
    inst._set_state(State.STOPPING, now)


def _launched(inst: Instance, ev: Event, now: float) -> None:
    assert isinstance(ev, Launched)
    inst.pid, inst.start_ticks, inst.launched_at = ev.pid, ev.start_ticks, now
    ready = inst.app.ready.kind is ReadyKind.NONE or inst.ready_told
    inst._set_state(State.READY if ready else State.RUNNING, now)


def _ready_early(inst: Instance, ev: Event, now: float) -> None:
    # READY=1 comes on the owner's observation stream, the launch's answer on a
    # connection of its own: the message can overtake the answer (as an exit can,
    # _exited_before_launched). It is this launch's (the supervisor feeds only the
    # current launch's); ignored, a healthy app was killed at its ready timeout.
    if inst.app.ready.kind is ReadyKind.NOTIFY:
        inst.ready_told = True


def _launched_while_stopping(inst: Instance, ev: Event, now: float) -> None:
    assert isinstance(ev, Launched)
    inst.pid, inst.start_ticks = ev.pid, ev.start_ticks  # the pending Stop covers it


def _launch_failed(inst: Instance, ev: Event, now: float) -> None:
    assert isinstance(ev, LaunchFailed)
    if ev.error is not None:
        inst.last_error = ev.error
    inst._report(Outcome.LAUNCH_FAILED)
    inst._after_failure(Outcome.LAUNCH_FAILED, now, exited=False)


def _exited(inst: Instance, ev: Event, now: float) -> None:
    assert isinstance(ev, Exited)
    inst.last_exit = LastExit(ev.exit_code, ev.signal, ev.core_dumped, inst.generation)
    outcome = exit_outcome(ev.exit_code, ev.signal)
    inst.count_exit(EXIT_REASON[outcome])
    inst._report(outcome)
    inst._after_failure(outcome, now, exited=True)


def _owner_stopped(inst: Instance, ev: Event, now: float) -> None:
    # The owner stopped it on its own as it shuts down: nothing failed and nobody asked
    # it down, so it is launched again, which waits for an owner (the next owner comes
    # with the next generation, which starts it as one lost between generations). The
    # app caused nothing here: no crash, no restart and no start-limit slot are counted.
    assert isinstance(ev, OwnerStopped)
    inst.last_exit = LastExit(ev.exit_code, ev.signal, ev.core_dumped, inst.generation)
    inst.count_exit(ExitReason.REQUESTED)
    inst._report(Outcome.STOPPED)
    inst._set_state(State.STOPPED, now)
    inst._launch(now, counted=False)


def _exited_before_launched(inst: Instance, ev: Event, now: float) -> None:
    # The exit event can overtake the launch's answer: they come on two connections from
    # the owner. The process did run, and with no readiness check it was ready the moment
    # it was launched, so it counts as having come up, as it does when the answer is first
    # (whether an apply reports a crash loop as started must not depend on that order).
    if inst.app.ready.kind is ReadyKind.NONE:
        inst.ready_count += 1
    _exited(inst, ev, now)


def _ready(inst: Instance, ev: Event, now: float) -> None:
    inst.timers.pop(Timer.READY_DELAY, None)  # it fired: nothing to cancel
    inst._set_state(State.READY, now)


def _ready_timeout(inst: Instance, ev: Event, now: float) -> None:
    if inst.timers.pop(Timer.READY_TIMEOUT, None) is None:
        return  # a late firing of a cancelled timer
    inst._stop(State.RESTARTING, now)
    inst.pending_outcome = Outcome.TIMEOUT


def _health_failed(inst: Instance, ev: Event, now: float) -> None:
    if inst.app.health is None:
        return  # the verdict of a check the config has since removed
    inst.health_failures += 1
    if inst.health_failures >= inst.app.health.failures:
        inst._stop(State.RESTARTING, now)
        inst.pending_outcome = Outcome.HEALTH


def _probed(inst: Instance, ev: Event, now: float) -> None:
    assert isinstance(ev, Probed)
    inst.last_probe = ev.note


def _health_ok(inst: Instance, ev: Event, now: float) -> None:
    inst.health_failures = 0


def _backoff_elapsed(inst: Instance, ev: Event, now: float) -> None:
    if inst.timers.pop(Timer.BACKOFF, None) is None:
        return  # a late firing of a cancelled timer
    inst._launch(now)


def _stopped_on_request(inst: Instance, ev: Event, now: float) -> None:
    if inst.pid is not None:  # a launch that failed while stopping ended no process
        inst.count_exit(ExitReason.REQUESTED)
    inst._set_state(State.STOPPED, now)
    inst._report(Outcome.STOPPED)


def _stopped_for_restart(inst: Instance, ev: Event, now: float) -> None:
    inst.count_exit(ExitReason.REQUESTED)
    outcome = inst.pending_outcome or Outcome.STOPPED
    inst._report(outcome)
    inst._after_failure(outcome, now, exited=False)


def _stopped_unexpectedly(inst: Instance, ev: Event, now: float) -> None:
    # Only this backend stops processes; if the owner says it is gone, believe it and
    # do not fight whoever did it.
    log.warning("%s: owner reports stopped while %s", inst.launch_key, inst.state)
    _stopped_on_request(inst, ev, now)


def _adopt(inst: Instance, ev: Event, now: float) -> None:
    assert isinstance(ev, Adopt)
    inst.generation = max(inst.generation, ev.generation)
    inst.restarts = max(inst.restarts, ev.restarts)
    inst.pid, inst.start_ticks = ev.pid, ev.start_ticks
    inst.launched_at = now if ev.age is None else now - ev.age   # uptime: the process's
    ready = ev.ready or inst.app.ready.kind is ReadyKind.NONE
    inst._set_state(State.READY if ready else State.RUNNING, now)


def _adopt_conflict(inst: Instance, ev: Event, now: float) -> None:
    assert isinstance(ev, Adopt)
    if ev.pid != inst.pid or ev.start_ticks != inst.start_ticks:
        log.warning("%s: refusing to adopt pid %d, already tracking pid %s",
                    inst.launch_key, ev.pid, inst.pid)


# ---- the table --------------------------------------------------------------------------
# One row per event, one cell per state, in State order:
#   stopped, starting, running, ready, stopping, restarting, backoff, failed, exited
S = State
_I, _R = _ignore, _reject
_ROWS: dict[type[Event], tuple[Handler, ...]] = {
    Start: (_start_fresh, _I, _I, _I, _R, _I, _start_from_backoff, _start_after_failed,
            _start_fresh),
    StopRequested: (_I, _stop_running, _stop_running, _stop_running, _I,
                    _escalate_to_stopping, _settle_stopped, _settle_stopped,
                    _settle_stopped),
    Launched: (_I, _launched, _I, _I, _launched_while_stopping, _I, _I, _I, _I),
    LaunchFailed: (_I, _launch_failed, _I, _I, _stopped_on_request, _I, _I, _I, _I),
    Exited: (_I, _exited_before_launched, _exited, _exited, _I, _I, _I, _I, _I),
    OwnerStopped: (_I, _owner_stopped, _owner_stopped, _owner_stopped, _I, _I, _I, _I, _I),
    Ready: (_I, _ready_early, _ready, _I, _I, _I, _I, _I, _I),
    ReadyTimeout: (_I, _I, _ready_timeout, _I, _I, _I, _I, _I, _I),
    HealthFailed: (_I, _I, _I, _health_failed, _I, _I, _I, _I, _I),
    HealthOk: (_I, _I, _I, _health_ok, _I, _I, _I, _I, _I),
    BackoffElapsed: (_I, _I, _I, _I, _I, _I, _backoff_elapsed, _I, _I),
    Stopped: (_I, _stopped_unexpectedly, _stopped_unexpectedly, _stopped_unexpectedly,
              _stopped_on_request, _stopped_for_restart, _I, _I, _I),
    Adopt: (_adopt, _adopt, _adopt_conflict, _adopt_conflict, _R, _R, _adopt, _adopt,
            _adopt),
    Probed: (_I, _I, _probed, _probed, _I, _I, _I, _I, _I),
}
assert all(len(row) == len(State) for row in _ROWS.values())
assert set(_ROWS) == set(EVENT_TYPES)

TRANSITIONS: dict[tuple[State, type[Event]], Handler] = {
    (state, event): row[i] for event, row in _ROWS.items() for i, state in enumerate(State)
}
