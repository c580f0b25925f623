"""The instance state machine: table completeness, restart policy, backoff, start limit,
readiness, health, adoption, stop in every state, and the checkpoint wire format.
A fake clock (plain floats); nothing sleeps."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.explain import Check, ErrorSource, LastError, LastProbe, reason
from backend.instance import (
    EVENT_TYPES,
    PUBLIC_STATE,
    TIMER_EVENTS,
    TRANSITIONS,
    Action,
    Adopt,
    BackoffElapsed,
    CancelTimer,
    Event,
    Exited,
    ExitReason,
    HealthFailed,
    HealthOk,
    Instance,
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
from backend.model import (
    App,
    Backoff,
    Health,
    HealthKind,
    Readiness,
    ReadyKind,
    RestartMode,
    StartLimit,
)
from protocol.errors import BadRequest

TCP_READY = Readiness(kind=ReadyKind.TCP, port=8000, timeout=5.0)
HEALTH = Health(kind=HealthKind.TCP, port=8000, failures=3)


def mk_app(restart: RestartMode = RestartMode.ON_FAILURE, ready: Readiness = TCP_READY,
           health: Health | None = HEALTH, backoff: Backoff | None = None,
           start_limit: StartLimit | None = None) -> App:
    return App(name="web", stack="shop", command=("srv",), restart=restart,
               ready=ready, health=health, backoff=backoff or Backoff(),
               start_limit=start_limit or StartLimit())


class Rig:
    """An instance, a fake clock and the timers the reconciler would hold."""

    def __init__(self, app: App | None = None) -> None:
        self.inst = Instance(app or mk_app(), 0)
        self.now = 0.0
        self.timers: dict[Timer, float] = {}
        self.pid = 100

    def feed(self, event: Event, advance: float = 0.0) -> list[Action]:
        self.now += advance
        actions = self.inst.handle(event, self.now)
        for a in actions:
            if isinstance(a, StartTimer):
                self.timers[a.name] = self.now + a.delay
            elif isinstance(a, CancelTimer):
                self.timers.pop(a.name, None)
        check_invariants(self.inst)
        return actions

    def fire(self, name: Timer) -> list[Action]:
        deadline = self.timers.pop(name)
        return self.feed(TIMER_EVENTS[name], max(0.0, deadline - self.now))

    def launched(self, advance: float = 0.1) -> list[Action]:
        self.pid += 1
        return self.feed(Launched(self.pid, 1000 + self.pid), advance)


def check_invariants(inst: Instance) -> None:
    allowed = {State.BACKOFF: {Timer.BACKOFF},
               State.RUNNING: {Timer.READY_TIMEOUT, Timer.READY_DELAY}}
    assert set(inst.timers) <= allowed.get(inst.state, set())
    if inst.state in (State.RUNNING, State.READY):
        assert inst.pid is not None
    assert inst.restarts >= 0 and inst.generation >= 0


def drive_to(state: State, app: App | None = None) -> Rig:
    """Reach ``state`` through real events only."""
    r = Rig(app)
    if state is State.STOPPED:
        return r
    r.feed(Start())
    steps: dict[State, list[Event]] = {
        State.STARTING: [], State.RUNNING: [], State.READY: [Ready()],
        State.STOPPING: [Ready(), StopRequested()], State.RESTARTING: [],
        State.BACKOFF: [Exited(1, None)], State.EXITED: [Ready(), Exited(0, None)],
    }
    if state is State.FAILED:
        while r.inst.state is not State.FAILED:
            if r.inst.state is State.BACKOFF:
                r.fire(Timer.BACKOFF)
            elif r.inst.state is State.STARTING:
                r.launched()
            else:
                r.feed(Exited(1, None), 0.1)
        return r
    if state is not State.STARTING:
        r.launched()
    for ev in steps[state]:
        r.feed(ev, 0.1)
    if state is State.RESTARTING:
        r.fire(Timer.READY_TIMEOUT)
    assert r.inst.state is state
    return r


def of(actions: list[Action], kind: type[Any]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


# ---- the table --------------------------------------------------------------------------


def test_table_has_every_state_event_pair() -> None:
    missing = [(s, e.__name__) for s in State for e in EVENT_TYPES if (s, e) not in TRANSITIONS]
    assert missing == []
    assert len(TRANSITIONS) == len(State) * len(EVENT_TYPES) == 9 * 14


def test_every_detailed_state_maps_to_a_public_state() -> None:
    assert set(PUBLIC_STATE) == set(State)
    assert set(PUBLIC_STATE.values()) == set(PublicState)
    assert [p.value for p in PublicState] == [
        "starting", "running", "ready", "stopping", "stopped", "backoff", "failed"]


def test_wire_values_are_stable() -> None:
    assert [s.value for s in State] == ["stopped", "starting", "running", "ready", "stopping",
                                        "restarting", "backoff", "failed", "exited"]
    assert [o.value for o in Outcome] == [
        "success", "exit-code", "signal", "timeout", "start-limit-hit", "health", "stopped",
        "launch-failed"]


@pytest.mark.parametrize("state", list(State))
def test_every_event_in_every_state_keeps_invariants(state: State) -> None:
    samples: list[Event] = [Start(), StopRequested(), Launched(7, 70), LaunchFailed("X"),
                            Exited(1, None), OwnerStopped(None, 15), Ready(),
                            ReadyTimeout(), HealthFailed(),
                            HealthOk(), BackoffElapsed(), Stopped(), Adopt(7, 70, True, 9),
                            Probed(LastProbe(Check.HEALTH, "tcp 127.0.0.1:8000",
                                             "connection refused", 0))]
    assert {type(e) for e in samples} == set(EVENT_TYPES)
    for ev in samples:
        r = drive_to(state)
        r.feed(ev, 1.0)  # check_invariants runs inside


# ---- start, launch keys, counters -------------------------------------------------------


def test_start_launches_generation_one_with_its_launch_key() -> None:
    r = Rig()
    assert r.feed(Start()) == [Launch(1, "shop/web/0/1")]
    assert r.inst.state is State.STARTING
    assert r.inst.public_state is PublicState.STARTING
    acts = r.launched()
    assert StartReadiness() in acts and StartTimer(Timer.READY_TIMEOUT, 5.0) in acts
    assert r.inst.public_state is PublicState.RUNNING
    acts = r.feed(Ready(), 0.5)
    assert acts == [CancelTimer(Timer.READY_TIMEOUT), StopReadiness(), StartHealth()]
    assert r.inst.state is State.READY and r.inst.restarts == 0


def test_no_readiness_means_ready_at_launch() -> None:
    r = Rig(mk_app(ready=Readiness(), health=None))
    r.feed(Start())
    assert r.launched() == []
    assert r.inst.state is State.READY


def test_delay_readiness_is_a_timer() -> None:
    r = Rig(mk_app(ready=Readiness(kind=ReadyKind.DELAY, delay=2.0), health=None))
    r.feed(Start())
    assert r.launched() == [StartTimer(Timer.READY_DELAY, 2.0)]
    r.fire(Timer.READY_DELAY)
    assert r.inst.state is State.READY


def test_duplicate_start_is_ignored_while_up() -> None:
    r = drive_to(State.READY)
    assert r.feed(Start()) == []
    assert r.inst.state is State.READY


def test_launch_failed_backs_off_and_reports() -> None:
    r = drive_to(State.STARTING)
    acts = r.feed(LaunchFailed("LAUNCH_FAILED"))
    assert acts == [Report(Outcome.LAUNCH_FAILED), StartTimer(Timer.BACKOFF, 0.0)]
    assert r.inst.state is State.BACKOFF


# ---- restart policy ---------------------------------------------------------------------


def crash_loop_delays(r: Rig) -> list[float]:
    delays = []
    r.feed(Start())
    while r.inst.state is not State.FAILED:
        r.launched()
        r.feed(Ready(), 0.1)
        acts = r.feed(Exited(1, None), 0.1)
        delays += [a.delay for a in of(acts, StartTimer)]
        if r.inst.state is State.BACKOFF:
            r.fire(Timer.BACKOFF)
    return delays


def test_crash_loop_backs_off_exponentially_then_hits_the_start_limit() -> None:
    r = Rig(mk_app(health=None))
    delays = crash_loop_delays(r)
    # the fifth failure gives up at once: a sixth start would be refused (5 in 60 s), so
    # no backoff promises one (was: backoff 4 s, "next start in 4.0s", then failed)
    assert delays == [0.0, 0.5, 1.0, 2.0]
    assert r.inst.state is State.FAILED
    assert r.inst.public_state is PublicState.FAILED
    assert r.inst.last_outcome is Outcome.START_LIMIT_HIT
    assert r.inst.generation == 5 and r.inst.restarts == 4
    assert r.timers == {}


def test_a_backoff_long_enough_to_free_a_start_is_waited_not_given_up() -> None:
    """The limit is judged at the time the restart would come: a backoff longer than
    the limit's window lets the oldest start leave it, so it is no reason to give up."""
    app = mk_app(health=None, backoff=Backoff(initial=20.0, max=20.0),
                 start_limit=StartLimit(burst=2, interval=10.0))
    r = Rig(app)
    r.feed(Start())
    for _ in range(3):
        r.launched()
        r.feed(Ready(), 0.1)
        r.feed(Exited(1, None), 0.1)
        assert r.inst.state is State.BACKOFF, r.inst.state
        r.fire(Timer.BACKOFF)
    assert r.inst.generation == 4


def test_backoff_delay_is_capped_at_max() -> None:
    app = mk_app(health=None, backoff=Backoff(initial=1.0, factor=3.0, max=10.0),
                 start_limit=StartLimit(burst=6, interval=1000.0))
    assert crash_loop_delays(Rig(app)) == [0.0, 1.0, 3.0, 9.0, 10.0]


def test_a_long_crash_loop_or_a_huge_factor_waits_max_and_never_overflows() -> None:
    """0.5 * 2.0**1024 is past a float: with the defaults, an app that fails at once for
    8.5 hours reached it, and a ``factor = 1e300`` at the fourth failure. The
    OverflowError killed the backend's observation loop."""
    assert Backoff().delay(2000) == 30.0 and Backoff().delay(1) == 0.0
    assert Backoff(initial=0.0).delay(2000) == 0.0
    app = mk_app(health=None, backoff=Backoff(initial=0.1, max=1.0, factor=1e300),
                 start_limit=StartLimit(burst=1000, interval=1.0))
    assert crash_loop_delays_for(Rig(app), 8) == [0.0, 0.1, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]


def crash_loop_delays_for(r: Rig, runs: int) -> list[float]:
    delays = []
    r.feed(Start())
    for _ in range(runs):
        r.launched()
        delays += [a.delay for a in of(r.feed(Exited(1, None), 0.1), StartTimer)]
        r.fire(Timer.BACKOFF)
    return delays


def test_start_limit_window_slides() -> None:
    # 5 starts per 60 s, but 10 s backoffs: the window never holds more than 5.
    app = mk_app(health=None, backoff=Backoff(initial=20.0, factor=1.0, max=20.0))
    r = Rig(app)
    r.feed(Start())
    for _ in range(10):
        r.launched()
        r.feed(Exited(1, None), 1.0)
        r.fire(Timer.BACKOFF)
        assert r.inst.state is State.STARTING
    assert r.inst.generation == 11


def test_operator_restarts_never_hit_the_start_limit_but_a_crash_loop_after_them_does(
        ) -> None:
    r = Rig(mk_app(health=None, start_limit=StartLimit(burst=3, interval=60.0)))
    r.feed(Start())
    r.launched()
    for _ in range(10):                       # `tenure restart` ten times in a few seconds
        r.feed(Ready(), 0.1)
        r.feed(StopRequested(), 0.1)
        r.feed(Stopped(), 0.1)
        r.feed(Start(), 0.1)
        r.launched()
        assert r.inst.state is State.RUNNING
    assert r.inst.generation == 11
    for _ in range(3):                        # then it crashes over and over: still limited
        r.feed(Exited(1, None), 0.1)
        if r.inst.state is State.BACKOFF:
            r.fire(Timer.BACKOFF)
            if r.inst.state is State.STARTING:
                r.launched()
    assert r.inst.state is State.FAILED
    assert r.inst.last_outcome is Outcome.START_LIMIT_HIT


def test_start_after_failed_resets_the_limit() -> None:
    r = drive_to(State.FAILED)
    gen = r.inst.generation
    assert r.feed(Start()) == [Launch(gen + 1, f"shop/web/0/{gen + 1}")]


@pytest.mark.parametrize(("mode", "code", "sig", "restarts"), [
    (RestartMode.ON_FAILURE, 0, None, False),
    (RestartMode.ON_FAILURE, 3, None, True),
    (RestartMode.ON_FAILURE, None, 9, True),
    (RestartMode.ALWAYS, 0, None, True),
    (RestartMode.ALWAYS, 1, None, True),
    (RestartMode.NEVER, 1, None, False),
    (RestartMode.NEVER, None, 15, False),
    (RestartMode.NEVER, 0, None, False),
])
def test_restart_policy(mode: RestartMode, code: int | None, sig: int | None,
                        restarts: bool) -> None:
    r = drive_to(State.READY, mk_app(restart=mode))
    acts = r.feed(Exited(code, sig), 1.0)
    expected = Outcome.SIGNAL if sig else (Outcome.SUCCESS if code == 0 else Outcome.EXIT_CODE)
    assert Report(expected) in acts and r.inst.last_outcome is expected
    assert StopHealth() in acts
    if restarts:
        assert r.inst.state is State.BACKOFF
        assert of(r.fire(Timer.BACKOFF), Launch) == [Launch(2, "shop/web/0/2")]
    else:
        assert r.inst.state is State.EXITED and r.timers == {}
        assert r.inst.public_state is PublicState.STOPPED


def test_exit_while_starting_counts_as_a_failed_run() -> None:
    r = drive_to(State.STARTING)
    r.feed(Exited(127, None))
    assert r.inst.state is State.BACKOFF
    assert r.inst.ready_count == 0  # a readiness check never passed


@pytest.mark.parametrize("exit_first", [False, True])
def test_a_crash_counts_as_up_whichever_of_exit_and_launch_answer_comes_first(
        exit_first: bool) -> None:
    """The exit event and the launch's answer come on two connections: with no readiness
    check, a process that ran counts as having come up in either order."""
    r = drive_to(State.STARTING, mk_app(ready=Readiness(), health=None))
    events: list[Event] = [Launched(101, 1101), Exited(3, None)]
    for ev in reversed(events) if exit_first else events:
        r.feed(ev, 0.01)
    assert r.inst.state is State.BACKOFF and r.inst.ready_count == 1


@pytest.mark.parametrize("state", [State.STARTING, State.RUNNING, State.READY])
def test_a_stop_the_owner_made_on_its_own_is_no_crash_and_launches_again_uncounted(
        state: State) -> None:
    """The owner stops every app as it shuts down (SIGTERM alone): was fed as a crash,
    counted `signal`, and relaunched through backoff as a restart spending the start
    limit, against an owner that was going away."""
    r = drive_to(state, mk_app(restart=RestartMode.ON_FAILURE,
                               start_limit=StartLimit(burst=1, interval=60.0)))
    gen, restarts, starts = r.inst.generation, r.inst.restarts, list(r.inst.starts)
    acts = r.feed(OwnerStopped(None, 15), 0.1)
    assert r.inst.state is State.STARTING and r.inst.pid is None
    assert [a.generation for a in of(acts, Launch)] == [gen + 1]
    assert r.inst.restarts == restarts and r.inst.starts == starts
    assert r.inst.exits == {ExitReason.REQUESTED: 1}
    assert r.inst.last_exit is not None and r.inst.last_exit.signal == 15
    assert [a.outcome for a in of(acts, Report)] == [Outcome.STOPPED]


@pytest.mark.parametrize("state", [State.STOPPING, State.RESTARTING, State.BACKOFF,
                                   State.STOPPED, State.FAILED, State.EXITED])
def test_a_stop_the_owner_made_where_no_process_runs_unasked_changes_nothing(
        state: State) -> None:
    r = drive_to(state)
    was = (r.inst.state, r.inst.generation, r.inst.restarts, dict(r.inst.exits))
    assert r.feed(OwnerStopped(None, 15), 0.1) == []
    assert (r.inst.state, r.inst.generation, r.inst.restarts, r.inst.exits) == was


# ---- readiness and health ---------------------------------------------------------------


def test_readiness_timeout_stops_then_backs_off() -> None:
    r = drive_to(State.RUNNING)
    acts = r.fire(Timer.READY_TIMEOUT)
    assert acts == [StopReadiness(), Stop(1, "shop/web/0/1")]
    assert r.inst.state is State.RESTARTING
    assert r.inst.public_state is PublicState.STOPPING
    assert r.feed(Exited(None, 15)) == []  # recorded by the owner's Stopped, not here
    acts = r.feed(Stopped(), 0.2)
    assert acts == [Report(Outcome.TIMEOUT), StartTimer(Timer.BACKOFF, 0.0)]
    assert r.inst.state is State.BACKOFF


def test_readiness_timeout_with_restart_never_fails() -> None:
    r = drive_to(State.RUNNING, mk_app(restart=RestartMode.NEVER))
    r.fire(Timer.READY_TIMEOUT)
    assert r.feed(Stopped()) == [Report(Outcome.TIMEOUT)]
    assert r.inst.state is State.FAILED


@pytest.mark.parametrize(("cause", "said"), [
    (Outcome.TIMEOUT, "not ready within 5s"), (Outcome.HEALTH, "health check failed")])
def test_a_start_limit_hit_through_probes_says_what_failed(cause: Outcome,
                                                           said: str) -> None:
    """Runs that a probe ended leave no exit or launch error behind: the start limit's
    line names the probe's verdict (kept as ``gave_up_after``), not only the limit."""
    r = Rig(mk_app(start_limit=StartLimit(burst=2, interval=60.0)))
    r.feed(Start())
    while r.inst.state is not State.FAILED:
        r.launched()
        if cause is Outcome.TIMEOUT:
            r.fire(Timer.READY_TIMEOUT)
        else:
            r.feed(Ready(), 0.1)
            for _ in range(3):
                r.feed(HealthFailed(), 1.0)
        r.feed(Stopped(), 0.1)
        if r.inst.state is State.BACKOFF:
            r.fire(Timer.BACKOFF)
    assert (r.inst.last_outcome, r.inst.gave_up_after) == (Outcome.START_LIMIT_HIT, cause)
    said += "; start limit hit (2 starts within 60s)"
    assert reason(r.inst) == said
    back = Instance.from_wire(json.loads(json.dumps(r.inst.to_wire())), r.inst.app)
    assert (back.gave_up_after, reason(back)) == (cause, said)
    r.feed(Start(), 1.0)   # a new start is a new story
    assert r.inst.gave_up_after is None and r.inst.to_wire()["gave_up_after"] is None


def test_late_ready_timeout_after_ready_is_ignored() -> None:
    r = drive_to(State.READY)
    assert r.feed(ReadyTimeout()) == []
    assert r.inst.state is State.READY


def test_health_failures_must_be_consecutive_then_restart() -> None:
    r = drive_to(State.READY)
    for ev in (HealthFailed(), HealthFailed(), HealthOk(), HealthFailed(), HealthFailed()):
        assert r.feed(ev, 10.0) == []
    assert r.inst.state is State.READY
    acts = r.feed(HealthFailed(), 10.0)
    assert acts == [StopHealth(), Stop(1, "shop/web/0/1")]
    assert r.inst.state is State.RESTARTING
    acts = r.feed(Stopped(), 1.0)
    # ready ~60 s > reset_after 30 s: the streak restarted; the first restart is immediate
    assert acts == [Report(Outcome.HEALTH), StartTimer(Timer.BACKOFF, 0.0)]
    assert of(r.fire(Timer.BACKOFF), Launch) == [Launch(2, "shop/web/0/2")]
    assert r.inst.restarts == 1


def test_health_restart_counts_for_backoff() -> None:
    r = drive_to(State.BACKOFF)  # one crash: streak 1
    r.fire(Timer.BACKOFF)
    r.launched()
    r.feed(Ready(), 0.1)
    for _ in range(3):
        r.feed(HealthFailed(), 1.0)
    assert of(r.feed(Stopped(), 0.1), StartTimer) == [StartTimer(Timer.BACKOFF, 0.5)]


@pytest.mark.parametrize(("uptime", "delay"), [(29.0, 1.0), (30.0, 0.0), (300.0, 0.0)])
def test_backoff_resets_after_stable_uptime(uptime: float, delay: float) -> None:
    r = Rig(mk_app(health=None))
    r.feed(Start())
    for _ in range(2):  # two quick crashes: delays 0.0, 0.5
        r.launched()
        r.feed(Exited(1, None), 0.1)
        r.fire(Timer.BACKOFF)
    r.launched(0.0)
    r.feed(Ready(), 0.5)
    acts = r.feed(Exited(1, None), uptime - 0.5)
    assert of(acts, StartTimer) == [StartTimer(Timer.BACKOFF, delay)]


def test_a_stable_run_begins_a_new_start_limit_window() -> None:
    """The start limit gives up on a crash loop, not on an app that stays up
    ``reset_after`` seconds each run (supervisord's ``startsecs``): its restarts are at
    once and as many as it needs. Runs shorter than that still hit the limit."""
    app = mk_app(health=None, backoff=Backoff(initial=0.5, reset_after=1.0),
                 start_limit=StartLimit(burst=2, interval=100.0))
    for run, gives_up in ((1.5, False), (0.5, True)):
        r = Rig(app)
        r.feed(Start())
        for _ in range(10):
            r.launched(0.0)
            r.feed(Exited(1, None), run)
            if r.inst.state is State.FAILED:
                break
            r.fire(Timer.BACKOFF)
        assert (r.inst.state is State.FAILED) is gives_up, (run, r.inst.state)
        assert r.inst.generation == (2 if gives_up else 11)


def test_runs_that_never_became_ready_are_no_stable_runs() -> None:
    """Was: a run ended by its ready timeout counted as stable when the timeout was at
    least ``reset_after`` (the defaults: 30 s each): every such run began a new streak
    and window, so an app that never became ready was relaunched at once for ever,
    never backed off nor given up on."""
    app = mk_app(health=None, backoff=Backoff(initial=1.0, reset_after=1.5),
                 start_limit=StartLimit(burst=3, interval=60.0))
    r = Rig(app)
    r.feed(Start())
    delays = []
    for _ in range(10):
        r.launched(0.0)
        r.fire(Timer.READY_TIMEOUT)              # 5 s, never ready
        acts = r.feed(Stopped(), 0.1)
        if r.inst.state is State.FAILED:
            break
        delays += [a.delay for a in of(acts, StartTimer)]
        r.fire(Timer.BACKOFF)
    assert r.inst.state is State.FAILED and r.inst.generation == 3
    assert delays == [0.0, 1.0]


# ---- adoption ---------------------------------------------------------------------------


def test_adopt_ready_does_not_launch_and_keeps_counters() -> None:
    r = Rig()
    acts = r.feed(Adopt(pid=4242, start_ticks=99, ready=True, generation=7, restarts=6))
    assert of(acts, Launch) == [] and acts == [StartHealth()]
    assert r.inst.state is State.READY and r.inst.pid == 4242
    assert (r.inst.generation, r.inst.restarts) == (7, 6)
    r.feed(Exited(1, None), 1.0)
    assert of(r.fire(Timer.BACKOFF), Launch) == [Launch(8, "shop/web/0/8")]
    assert r.inst.restarts == 7


def test_adopt_not_ready_waits_for_readiness() -> None:
    r = Rig()
    acts = r.feed(Adopt(4242, 99, ready=False, generation=3))
    assert acts == [StartReadiness(), StartTimer(Timer.READY_TIMEOUT, 5.0)]
    assert r.inst.state is State.RUNNING


def test_adopt_while_tracking_another_process_is_refused() -> None:
    r = drive_to(State.READY)
    pid = r.inst.pid
    assert r.feed(Adopt(1, 1, True, 99)) == []
    assert r.inst.pid == pid and r.inst.generation == 1


# ---- stop in every state ----------------------------------------------------------------

STOP_EXPECT: dict[State, tuple[State, bool]] = {
    State.STOPPED: (State.STOPPED, False),
    State.STARTING: (State.STOPPING, True),
    State.RUNNING: (State.STOPPING, True),
    State.READY: (State.STOPPING, True),
    State.STOPPING: (State.STOPPING, False),
    State.RESTARTING: (State.STOPPING, False),  # a Stop is already in flight
    State.BACKOFF: (State.STOPPED, False),
    State.FAILED: (State.STOPPED, False),
    State.EXITED: (State.STOPPED, False),
}


@pytest.mark.parametrize("state", list(State))
def test_stop_requested_in_every_state(state: State) -> None:
    r = drive_to(state)
    acts = r.feed(StopRequested(), 0.1)
    after, sends_stop = STOP_EXPECT[state]
    assert r.inst.state is after
    assert bool(of(acts, Stop)) is sends_stop
    assert r.timers == {}
    if after is State.STOPPING:
        acts = r.feed(Stopped(), 0.1)
        assert acts == [Report(Outcome.STOPPED)]
        assert r.inst.state is State.STOPPED and r.inst.pid is None


def test_stop_while_starting_then_launch_answer_arrives() -> None:
    r = drive_to(State.STARTING)
    assert r.feed(StopRequested()) == [Stop(1, "shop/web/0/1")]
    assert r.feed(Launched(555, 5)) == []
    assert r.inst.state is State.STOPPING and r.inst.pid == 555
    r.feed(Stopped())
    assert r.inst.state is State.STOPPED


def test_launch_failed_while_stopping_is_stopped() -> None:
    r = drive_to(State.STARTING)
    r.feed(StopRequested())
    assert r.feed(LaunchFailed("X")) == [Report(Outcome.STOPPED)]
    assert r.inst.state is State.STOPPED


def test_start_while_stopping_is_refused() -> None:
    r = drive_to(State.STOPPING)
    assert r.feed(Start()) == []
    assert r.inst.state is State.STOPPING


def test_unexpected_stopped_while_up_settles_stopped() -> None:
    r = drive_to(State.READY)
    assert r.feed(Stopped()) == [StopHealth(), Report(Outcome.STOPPED)]
    assert r.inst.state is State.STOPPED


def test_late_backoff_elapsed_is_ignored() -> None:
    r = drive_to(State.BACKOFF)
    r.feed(StopRequested())
    assert r.feed(BackoffElapsed()) == []
    assert r.inst.state is State.STOPPED


# ---- wire -------------------------------------------------------------------------------


@pytest.mark.parametrize("state", list(State))
def test_wire_round_trip_in_every_state(state: State) -> None:
    r = drive_to(state)
    wire = r.inst.to_wire()
    wire = json.loads(json.dumps(wire))  # plain data only
    back = Instance.from_wire(wire, r.inst.app)
    assert back.to_wire() == r.inst.to_wire()
    assert back.state is state and back.timers == r.inst.timers


def test_resume_rearms_timers_from_absolute_deadlines() -> None:
    r = drive_to(State.RUNNING)  # ready-timeout 5 s after launch at t=0.1
    back = Instance.from_wire(r.inst.to_wire(), r.inst.app)
    timer, probe = back.resume(r.now + 2.0)
    assert timer == StartTimer(Timer.READY_TIMEOUT, pytest.approx(3.0))
    assert probe == StartReadiness()
    assert back.resume(r.now + 9.0)[0] == StartTimer(Timer.READY_TIMEOUT, 0.0)
    ready = Instance.from_wire(drive_to(State.READY).inst.to_wire(), r.inst.app)
    assert ready.resume(0.0) == [StartHealth()]


def test_restored_backoff_continues() -> None:
    r = drive_to(State.BACKOFF)
    back = Instance.from_wire(r.inst.to_wire(), r.inst.app)
    assert of(back.handle(BackoffElapsed(), r.timers[Timer.BACKOFF]), Launch) == [
        Launch(2, "shop/web/0/2")]


def _crash_looped_at(now: float) -> Rig:
    """An instance whose second run failed at ``now`` (CLOCK_MONOTONIC of its boot): it
    waits 6 s for its third and last start within its start limit."""
    r = Rig(mk_app(ready=Readiness(kind=ReadyKind.NONE), health=None,
                   backoff=Backoff(initial=6.0, max=6.0),
                   start_limit=StartLimit(burst=3, interval=100.0)))
    r.now = now
    for _ in range(2):
        r.feed(Start() if r.inst.state is State.STOPPED else BackoffElapsed())
        r.launched()
        r.feed(Exited(1, None), 1.0)
    assert r.inst.state is State.BACKOFF and len(r.inst.starts) == 2
    return r


def test_state_saved_in_another_boot_waits_no_backoff_and_counts_no_starts() -> None:
    """backend.db read after a reboot: its times are the last boot's CLOCK_MONOTONIC,
    ~11 days here. Was: the instance stayed in backoff for those 11 days (only `tenure
    start` started it), its old starts inside the start-limit window as long."""
    r = _crash_looped_at(1_000_000.0)
    wire = {**r.inst.to_wire(), "boot": "the-boot-before"}
    back = Instance.from_wire(json.loads(json.dumps(wire)), r.inst.app)
    assert back.resume(40.0) == [StartTimer(Timer.BACKOFF, 0.0)]
    assert back.starts == []
    assert of(back.handle(BackoffElapsed(), 40.0), Launch) == [Launch(3, "shop/web/0/3")]
    back.handle(Launched(7, 70), 40.1)
    back.handle(Exited(1, None), 41.0)
    assert back.state is State.BACKOFF   # one start in its window, not three
    # resumed again in this boot (a handoff aborted: the generation thaws): its times
    # are this boot's now, kept as they are
    assert back.resume(42.0) == [StartTimer(Timer.BACKOFF, pytest.approx(5.0))]
    assert back.starts == [40.0]


def test_restored_times_this_boot_cannot_have_are_bounded() -> None:
    """State without its boot (written before it was saved) or damaged: no timer waits
    longer than its own length, and a start after now is not counted."""
    r = _crash_looped_at(1_000_000.0)
    wire = r.inst.to_wire()
    del wire["boot"]
    back = Instance.from_wire(wire, r.inst.app)
    assert back.resume(40.0) == [StartTimer(Timer.BACKOFF, 6.0)]
    assert back.starts == []
    same = Instance.from_wire(r.inst.to_wire(), r.inst.app)   # this boot: as saved
    assert same.resume(r.now + 2.0) == [StartTimer(Timer.BACKOFF, pytest.approx(4.0))]
    assert same.starts == r.inst.starts


@pytest.mark.parametrize(("change", "field"), [
    ({"v": 2}, "v"),
    ({"app": "other"}, "app"),
    ({"state": "zombie"}, "state"),
    ({"generation": True}, "generation"),
    ({"generation": -1}, "generation"),
    ({"restarts": "3"}, "restarts"),
    ({"timers": {"backoff": float("nan")}}, "timers"),
    ({"timers": {"nap": 1.0}}, "timers"),
    ({"starts": [1.0, "x"]}, "starts"),
    ({"last_outcome": "great"}, "last_outcome"),
    ({"timers": {}}, "timers"),                 # backoff without its timer
    ({"state": "ready", "pid": None, "timers": {}}, "pid"),
    ({"state": "ready"}, "timers"),             # a backoff timer in ready
    ({"pending_outcome": "health"}, "pending_outcome"),
    ({"gave_up_after": "timeout"}, "gave_up_after"),   # only once given up
    ({"gave_up_after": "bored"}, "gave_up_after"),
    ({"exits": {"requested": -1}}, "exits"),
    ({"exits": {"bored": 1}}, "exits"),
    ({"exits": [1]}, "exits"),
    ({"base_generation": -1}, "base_generation"),
    ({"base_generation": 99}, "base_generation"),   # beyond its generation
    # integers past a float's range (JSON holds them): OverflowError escaped before
    ({"launched_at": 10**400}, "launched_at"),
    ({"starts": [10**400]}, "starts"),
    ({"timers": {"backoff": -(10**400)}}, "timers"),
])
def test_from_wire_refuses_bad_fields(change: dict[str, Any], field: str) -> None:
    r = drive_to(State.BACKOFF)
    wire = {**r.inst.to_wire(), **change}
    with pytest.raises(BadRequest) as exc:
        Instance.from_wire(wire, r.inst.app)
    assert exc.value.data.get("field") == field


def test_from_wire_requires_every_field_and_ignores_extras() -> None:
    r = drive_to(State.READY)
    wire = r.inst.to_wire()
    for key in ("v", "stack", "app", "instance", "state", "generation", "restarts",
                "streak", "starts", "health_failures", "timers"):
        with pytest.raises(BadRequest):
            Instance.from_wire({k: v for k, v in wire.items() if k != key}, r.inst.app)
    back = Instance.from_wire({**wire, "future": {"x": 1}}, r.inst.app)
    assert back.to_wire() == wire


def test_an_instance_after_a_removed_one_launches_after_it_and_counts_its_own() -> None:
    """A removed instance's launches (generations 1-3 of the key) are not this one's: it
    starts at 4, with no restart counted, and its next launch is its first restart."""
    r = Rig(mk_app(restart=RestartMode.ALWAYS, ready=Readiness(), health=None))
    r.inst = Instance(r.inst.app, 0, generation=3)
    assert r.feed(Start()) == [Launch(4, "shop/web/0/4")]
    r.launched()
    assert r.inst.state is State.READY and r.inst.restarts == 0
    r.feed(Exited(None, 9), 5.0)
    r.fire(Timer.BACKOFF)
    assert (r.inst.generation, r.inst.restarts) == (5, 1)
    back = Instance.from_wire(r.inst.to_wire(), r.inst.app)
    assert (back.base_generation, back.generation, back.restarts) == (3, 5, 1)
    old = {k: v for k, v in r.inst.to_wire().items() if k != "base_generation"}
    assert Instance.from_wire(old, r.inst.app).base_generation == 0   # written before it


def test_exits_are_counted_by_reason_and_carried_over_the_wire() -> None:
    r = drive_to(State.READY, mk_app(restart=RestartMode.ALWAYS))
    for code, sig in ((0, None), (3, None), (None, 9)):
        r.feed(Exited(code, sig), 1.0)
        r.fire(Timer.BACKOFF)
        r.launched()
        r.feed(Ready())
    r.feed(StopRequested())
    r.feed(Stopped())
    assert r.inst.exits == {ExitReason.SUCCESS: 1, ExitReason.FAILURE: 1,
                            ExitReason.SIGNAL: 1, ExitReason.REQUESTED: 1}
    back = Instance.from_wire(json.loads(json.dumps(r.inst.to_wire())), r.inst.app)
    assert back.exits == r.inst.exits
    fresh = Instance(r.inst.app, 0)
    fresh.carry(back)
    assert fresh.exits == r.inst.exits and fresh.restarts == r.inst.restarts


def test_a_policy_restart_is_a_requested_exit_and_an_old_record_reads_as_zero() -> None:
    r = drive_to(State.RESTARTING)
    r.feed(Stopped())
    assert r.inst.exits == {ExitReason.REQUESTED: 1}
    wire = r.inst.to_wire()
    del wire["exits"]
    assert Instance.from_wire(wire, r.inst.app).exits == {}


WIRE_KEYS = list(Instance(mk_app()).to_wire())
# integers past a float's range too: JSON (backend.db, checkpoints) carries them
scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.sampled_from([10**400, -(10**400)])
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from([s.value for s in State] + [o.value for o in Outcome]
                             + [t.value for t in Timer]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8) | st.sampled_from(
                          [t.value for t in Timer]), inner, max_size=4), max_leaves=8)


def assert_instance_or_bad_request(data: Any) -> None:
    app = mk_app()
    try:
        inst = Instance.from_wire(data, app)
    except BadRequest:
        return
    check_invariants(inst)
    assert Instance.from_wire(inst.to_wire(), app).to_wire() == inst.to_wire()


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(WIRE_KEYS) | st.text(max_size=8), values,
                       max_size=20))
def test_fuzz_from_wire_arbitrary_dicts(data: dict[str, Any]) -> None:
    assert_instance_or_bad_request(data)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(list(State)), st.sampled_from(WIRE_KEYS), values, st.booleans())
def test_fuzz_from_wire_mutated_checkpoints(state: State, key: str, value: Any,
                                            delete: bool) -> None:
    wire = drive_to(state).inst.to_wire()
    if delete:
        del wire[key]
    else:
        wire[key] = value
    assert_instance_or_bad_request(wire)


@given(st.none() | st.integers() | st.text() | st.lists(st.integers()))
def test_fuzz_from_wire_non_maps(data: Any) -> None:
    with pytest.raises(BadRequest):
        Instance.from_wire(data, mk_app())


EVENTS = st.sampled_from([Start(), StopRequested(), Launched(9, 90), LaunchFailed("X"),
                          Exited(1, None), Exited(0, None), Exited(None, 9), Ready(),
                          ReadyTimeout(), HealthFailed(), HealthOk(), BackoffElapsed(),
                          Stopped(), Adopt(9, 90, False, 4), Exited(None, 11, True),
                          LaunchFailed("LAUNCH_FAILED", LastError(
                              "spawn failed: x: No such file or directory", "LAUNCH_FAILED",
                              "ENOENT", ErrorSource.OWNER, 0)),
                          Probed(LastProbe(Check.READINESS, "tcp 127.0.0.1:8000",
                                           "not listening", 0))])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(EVENTS, st.floats(0.0, 100.0)), max_size=40))
def test_fuzz_event_sequences_keep_invariants(steps: list[tuple[Event, float]]) -> None:
    r = Rig()
    for ev, dt in steps:
        launches = of(r.feed(ev, dt), Launch)
        for launch in launches:
            assert launch.generation == r.inst.generation
        wire = r.inst.to_wire()
        assert Instance.from_wire(wire, r.inst.app).to_wire() == wire


def test_a_policy_change_moves_the_health_check_of_a_ready_instance_at_once() -> None:
    r = drive_to(State.READY)
    other = Health(kind=HealthKind.TCP, port=8001, failures=1)
    assert r.inst.take_app(mk_app(health=HEALTH), r.now) == []                # the same check
    assert r.inst.take_app(mk_app(health=other), r.now) == [StopHealth(), StartHealth()]
    assert r.inst.take_app(mk_app(health=None), r.now) == [StopHealth()]       # removed
    assert r.inst.app.health is None and r.inst.state is State.READY
    assert r.feed(HealthFailed()) == [] and r.inst.state is State.READY  # a late verdict
    assert r.inst.take_app(mk_app(health=HEALTH), r.now) == [StopHealth(), StartHealth()]  # back
    starting = drive_to(State.RUNNING)          # not ready: it starts when ready
    assert starting.inst.take_app(mk_app(health=None), starting.now) == []
    assert starting.inst.app.health is None


def _in_backoff(initial: float) -> Rig:
    """An instance of mk_app(backoff initial=max=``initial``) waiting its second delay."""
    r = drive_to(State.BACKOFF, mk_app(backoff=Backoff(initial=initial, max=initial)))
    r.fire(Timer.BACKOFF)       # the first restart after a stable run is at once
    r.launched()
    r.feed(Exited(1, None), 0.1)
    assert r.inst.state is State.BACKOFF and r.timers[Timer.BACKOFF] == r.now + initial
    return r


def test_a_policy_change_reaches_an_instance_in_backoff_at_once() -> None:
    """Was: the wait begun under the old backoff was kept, and a restart the new policy
    forbids still came at its end."""
    r = _in_backoff(15.0)
    began = r.now
    r.now += 2.0
    out = r.inst.take_app(mk_app(backoff=Backoff(initial=5.0, max=5.0)), r.now)
    assert out == [StartTimer(Timer.BACKOFF, pytest.approx(3.0))], out   # 5 s from its start
    assert r.inst.timers[Timer.BACKOFF] == pytest.approx(began + 5.0)
    r.now += 4.0                                            # already past the new delay
    out = r.inst.take_app(mk_app(backoff=Backoff(initial=1.0, max=1.0)), r.now)
    assert out == [StartTimer(Timer.BACKOFF, pytest.approx(0.0))], out
    same = r.inst.take_app(mk_app(backoff=Backoff(initial=1.0, max=1.0)), r.now)
    assert same == []   # nothing changed: nothing re-armed

    never = _in_backoff(15.0)
    out = never.inst.take_app(mk_app(restart=RestartMode.NEVER), never.now)
    assert never.inst.state is State.EXITED and out == [CancelTimer(Timer.BACKOFF)], out
    assert not never.inst.timers

    limited = _in_backoff(15.0)   # two starts so far: a limit of 2 refuses the third
    out = limited.inst.take_app(mk_app(backoff=Backoff(initial=15.0, max=15.0),
                                       start_limit=StartLimit(burst=2, interval=60)),
                                limited.now)
    assert limited.inst.state is State.FAILED and CancelTimer(Timer.BACKOFF) in out


def test_leaving_ready_stops_a_check_whatever_the_app_says_now() -> None:
    r = drive_to(State.READY)
    r.inst.app = mk_app(health=None)            # swapped without take_app
    assert StopHealth() in r.feed(StopRequested())


NOTIFY_READY = Readiness(kind=ReadyKind.NOTIFY, timeout=4.0)


def test_ready_before_the_launch_answer_is_kept_for_it() -> None:
    """Was: READY=1 (the owner's observation stream) overtaking the launch's answer (its
    own connection) was ignored in ``starting``: the instance waited in ``running`` for a
    message already gone, and a healthy app was stopped at its ready timeout."""
    r = Rig(mk_app(ready=NOTIFY_READY))
    r.feed(Start())
    assert r.inst.state is State.STARTING
    assert r.feed(Ready()) == []
    actions = r.launched()
    assert r.inst.state is State.READY and r.inst.pid == r.pid
    assert Timer.READY_TIMEOUT not in r.timers
    assert not any(isinstance(a, StartReadiness) for a in actions)
    # the next launch waits for its own message
    r.feed(Exited(1, None), 1.0)
    if r.inst.state is State.BACKOFF:
        r.fire(Timer.BACKOFF)
    assert r.inst.state is State.STARTING
    r.launched()
    assert r.inst.state is State.RUNNING and Timer.READY_TIMEOUT in r.timers


def test_ready_before_the_answer_counts_only_for_notify_readiness() -> None:
    """Another kind's Ready comes from a check that starts once launched: one in
    ``starting`` belongs to no check of this launch and proves nothing."""
    r = Rig(mk_app(ready=TCP_READY))
    r.feed(Start())
    r.feed(Ready())
    r.launched()
    assert r.inst.state is State.RUNNING
