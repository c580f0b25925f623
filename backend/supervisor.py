"""The reconciler: drives every app instance's state machine against the owner.

It owns all I/O the machines ask for: owner RPC (launch, stop) with the current epoch
(through backend.owner_mutations), timers, readiness and health probes (through
backend.checks), and starts that wait for an instance to be down or for its ``after``
apps (through backend.start_waits). Events come from the owner's observation stream
(exits, notify messages), from RPC results and from timers and probes — never from
polling the inventory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from protocol.errors import ShuttingDown, TenureError

from . import explain
from . import instance as im
from .after_stop import Journal
from .checks import Checks
from .events import Before, EventLog, moment, transition_events
from .model import App, Config, ReadyKind
from .owner_mutations import OwnerCalls, OwnerMutations, fenced_off
from .start_order import once_ready, waits_for
from .start_waits import StartWaits
from .tasks import spawn
from .waiters import Waiters

__all__ = ["Supervisor", "instance_key"]

log = logging.getLogger("tenure.backend")

BASE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ", "HOME", "USER", "LOGNAME")


_RPC_RESULTS = (im.Launched, im.LaunchFailed, im.Stopped)
_INTENTS = (im.Start, im.StopRequested)
STATUS_TEXT_MAX = 200         # characters of an app's STATUS= kept (as the owner does)


def instance_key(stack: str, app: str, index: int) -> str:
    return f"{stack}/{app}/{index}"


def now() -> float:
    return time.monotonic()  # CLOCK_MONOTONIC: one clock for all processes of a boot


class Supervisor:
    """All instances of the applied config. Construct inside the running loop."""

    def __init__(self, owner: OwnerCalls, epoch: int,
                 on_mutation: Callable[[str], None] | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """``on_mutation(method)`` runs before every owner mutation is sent and must make
        the recovery certificate stop vouching; if it raises, the call is not sent.
        ``sleep`` paces retries (a fake in unit tests)."""
        self.owner = owner
        self.epoch = epoch
        self.fenced = False                      # a newer epoch exists: never act again
        self.frozen = False                      # draining for a handoff
        self.instances: dict[str, im.Instance] = {}
        self.by_launch: dict[str, str] = {}      # current launch key -> instance key
        # (only the current one of each: an entry per launch grew without end)
        self.status_text: dict[str, str] = {}   # launch key -> its app's last STATUS=
        self.dirty: set[str] = set()
        # Instance key -> the last generation an instance of that key launched before it
        # was removed (scaled away, its app taken out): its launch keys are spent, so an
        # instance added back under the key starts after it. Loaded from backend.db;
        # ``removed`` holds the ones not saved yet.
        self.retired: dict[str, int] = {}
        self.removed: dict[str, int] = {}
        self._timers: dict[tuple[str, im.Timer], asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._waiters = Waiters()
        self.base_env = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ}
        self.owner_capabilities: Mapping[str, int] = {}  # from the owner's welcome
        self.checks = Checks(owner, self.instances, self.feed,
                             lambda: self.owner_capabilities, lambda: self.base_env,
                             self._spawn)
        self.events: EventLog | None = None      # where transitions are recorded
        self.mutations = OwnerMutations(self, on_mutation or (lambda method: None), sleep,
                                        self._spawn)
        self.starts = StartWaits(self, lambda key, inst: self._apply(key, inst, im.Start()))
        # told once when this generation learns it is fenced (backend.generation)
        self.on_fenced: Callable[[str], None] = lambda why: None
        # whether the owner answers this generation (backend.generation: its owner link)
        self.owner_answers: Callable[[], bool] = lambda: True
        # saves the instances before a stop is sent (backend.generation: backend.db), so
        # that a generation recovered after a crash knows the stop was asked
        self.save_before_stop: Callable[[], None] = lambda: None
        # instances whose start waits for a config queued before this generation began
        # (backend.generation: `tenure up --config` on a home whose daemons were down):
        # not saved while they wait, so backend.db keeps them as they were; any event
        # fed to one decides it (the queued config's operation, `tenure stop`, ...)
        self.deferred: set[str] = set()
        # runs as an instance's launch is about to be sent (backend.operations: the
        # desired config's App is what a new process runs)
        self.before_launch: Callable[[str, im.Instance], None] = lambda key, inst: None
        # the config applied (backend.operations: the desired one); None before there is
        # one. The end of a process sweeps what of it this no longer names
        self.applied: Callable[[], Config | None] = lambda: None
        # the open operation a step of which, still to run, starts stopped instance
        # ``key``, None when none does (backend.operations: an apply's later levels)
        self.step_start: Callable[[str], str | None] = lambda key: None

    @property
    def in_flight(self) -> int:
        """Owner mutations sent and not answered yet: a drain waits for zero."""
        return self.mutations.in_flight

    def fence(self, why: str) -> None:
        """A newer generation holds the owner: never act again, and say so once. Every
        place that learns it (an owner call refused with STALE_EPOCH, an epoch read
        from the owner) calls this."""
        if self.fenced:
            return
        self.fenced = True
        log.warning("fenced: %s", why)
        self._cancel_timers()
        self.starts.clear("this generation is fenced off", durable=True)
        self.on_fenced(why)

    # -- owner calls (backend.owner_mutations) ----------------------------------------

    def in_flight_calls(self) -> list[str]:
        """OwnerMutations.in_flight_calls: the owner calls in flight, oldest first."""
        return self.mutations.in_flight_calls()

    def leaving(self, key: str) -> bool:
        """Whether what the last run of ``key`` left running is being stopped."""
        return self.mutations.leaving(key)

    def owner_away(self, exc: TenureError) -> bool:
        """OwnerMutations.owner_away: whether a launch that failed with ``exc`` found no
        owner to take it."""
        return self.mutations.owner_away(exc)

    async def retune_sockets(self, app: App) -> None:
        """OwnerMutations.retune_sockets; raises what it raises."""
        await self.mutations.retune_sockets(app)

    async def sweep_sockets(self, config: Config) -> None:
        """OwnerMutations.sweep_sockets; raises nothing."""
        await self.mutations.sweep_sockets(config)

    # -- starts that wait, intents (backend.start_waits) ------------------------------

    def start_when_down(self, key: str, within: float, *, stop: bool = False
                        ) -> asyncio.Future[bool]:
        """StartWaits.start_when_down: feed ``Start`` to ``key`` once it is down; raises
        what recording it raises."""
        return self.starts.start_when_down(key, within, stop=stop)

    def pending_start(self, key: str) -> asyncio.Future[bool] | None:
        """The start of ``key`` wanted once it is down, while one is pending."""
        return self.starts.pending_start(key)

    def keep_starts_in(self, journal: Journal, activation: str) -> None:
        """StartWaits.keep_starts_in: pending starts are recorded in ``journal``."""
        self.starts.keep_starts_in(journal, activation)

    def resume_order_wait(self, key: str, deadline: float) -> None:
        """StartWaits.resume_order_wait; raises what it raises."""
        self.starts.resume_order_wait(key, deadline)

    def stopped_since(self, keys: list[str]) -> Callable[[], list[str]]:
        """StartWaits.stopped_since: which of ``keys`` a stop was asked of since."""
        return self.starts.stopped_since(keys)

    def started_since(self, keys: list[str]) -> Callable[[], list[str]]:
        """StartWaits.started_since: which of ``keys`` a start was asked of since."""
        return self.starts.started_since(keys)

    # -- feeding events ---------------------------------------------------------------

    def feed(self, key: str, event: im.Event) -> None:
        """Apply one event. Raises ShuttingDown for a start or stop wanted while frozen:
        nothing would re-derive it, so dropping it would lose the change (the drain
        barrier, backend.steps, keeps every such change out of a frozen reconciler)."""
        inst = self.instances.get(key)
        if inst is None:
            return
        if self.fenced:   # what it decided now would be another generation's to decide
            if isinstance(event, _INTENTS):
                raise fenced_off(key)
            return
        if self.frozen and not isinstance(event, _RPC_RESULTS):
            if isinstance(event, _INTENTS):
                raise ShuttingDown(f"{key}: {type(event).__name__} while frozen for a "
                                   "handoff", {"instance": key})
            return  # re-derived after thaw or by the next generation (see freeze)
        if isinstance(event, im.Start):
            self.starts.start_fed(key)
            if self.starts.held_for_order(key, inst):
                return
        self._apply(key, inst, event)

    def _apply(self, key: str, inst: im.Instance, event: im.Event) -> None:
        self.deferred.discard(key)
        if isinstance(event, im.StopRequested):   # the latest intent wins
            self.starts.stop_fed(key)
        self._transition(key, inst, event, lambda: inst.handle(event, now()))

    def _transition(self, key: str, inst: im.Instance, event: im.Event | None,
                    change: Callable[[], list[im.Action]]) -> None:
        """Make one ``change`` to instance ``key`` (an ``event`` handled, or its app
        taken: None) and follow it through: recorded as events, saved, its actions
        executed, waiters woken, what waited for its state looked at again."""
        was = Before(inst) if self.events is not None else None
        launch_key, ran, had_process = inst.launch_key, inst.app, inst.pid is not None
        actions = change()
        if self.events is not None and was is not None:
            transition_events(self.events, key, inst, event, was)
        if inst.launch_key != launch_key:   # its events are ignored (on_observation)
            self._drop_launch(key, launch_key)
        if had_process and inst.pid is None and (config := self.applied()) is not None:
            # exited or stopped (however it was told): it may have been the last user
            # of a socket the config left, and a relaunch runs the config's own
            self.mutations.process_ended(ran, config)
        self.by_launch[inst.launch_key] = key
        self.dirty.add(key)
        self.execute(key, actions)
        self._notify()
        self.starts.start_if_down(key)
        self.starts.recheck_order(inst)

    def reason(self, key: str) -> str | None:
        """Instance ``key``'s one-line reason as status gives it: explain.reason, then
        what only this reconciler knows (:meth:`why`)."""
        return "; ".join(filter(None, (explain.reason(self.instances[key]),
                                       self.why(key)))) or None

    def why(self, key: str) -> str | None:
        """What explain.reason cannot say of instance ``key``: that what its last run
        left running is being stopped (its next launch waits for that), why a stopped
        one is not started (its start waits for its ``after`` apps, or for its step in
        an open operation, or it was never started: an apply that added it failed
        before its step, say), or why a stopping one's stop is being tried again; None
        otherwise."""
        inst = self.instances[key]
        said = self.mutations.why(key, inst)
        if said is not None or inst.state is not im.State.STOPPED:
            return said
        if key in self.starts:
            return self.starts.why(key)
        if (op := self.step_start(key)) is not None:
            return self._step_why(key, op)
        return None if inst.started else "never started"

    def _step_why(self, key: str, op: str) -> str:
        """Why stopped instance ``key``, which a step of operation ``op`` still starts,
        is not started yet: its ``after`` apps still on their way up (as a start held
        for them says it, backend.start_waits), else the steps before its own."""
        held = _Held(self.starts, self.step_start)
        return once_ready(waits_for(self.instances, held, key)) or \
            f"waits for its step in operation {op}"

    def wake(self) -> None:
        """Make every ``wait`` re-check its predicate (something it reads changed)."""
        self._notify()

    def _notify(self) -> None:
        """Wake every waiter; each re-checks its own predicate (no task per event)."""
        self._waiters.wake()

    async def wait(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``predicate()`` holds (re-checked after every transition); None:
        no time limit."""
        return await self._waiters.until(predicate, timeout)

    def on_observation(self, e: dict[str, Any]) -> None:
        """One owner event: exits and notify messages become machine events."""
        key = self.by_launch.get(e.get("launch_key", ""), "")
        inst = self.instances.get(key)
        if inst is None or inst.launch_key != e.get("launch_key"):
            return  # not ours or an older generation's
        if e["kind"] == "exit":
            self.status_text.pop(inst.launch_key, None)
            if e.get("descendants"):
                self.mutations.stop_left_behind(key, e["launch_key"], e["descendants"])
            ended = im.OwnerStopped if e.get("stopped") is True else im.Exited
            pid, left = e.get("pid"), e.get("descendants")
            self.feed(key, ended(e.get("exit_code"), e.get("signal"),
                                 e.get("core_dumped") is True,
                                 pid if isinstance(pid, int) else None,
                                 left if isinstance(left, int) else 0,
                                 moment(e.get("at"))))   # a replay comes late
        elif e["kind"] == "notify":
            fields = e.get("fields") or {}
            if "STATUS" in fields:
                self.told_status(inst.launch_key, fields["STATUS"])
            if fields.get("READY") == "1" and inst.app.ready.kind is ReadyKind.NOTIFY:
                self.feed(key, im.Ready())

    def told_status(self, launch_key: str, text: Any) -> None:
        """The app of ``launch_key`` said ``STATUS=text`` (status's DETAIL when nothing
        else is said, inspect's ``app status``); an empty text clears it, as under
        systemd. What is not a string is not taken."""
        if isinstance(text, str) and text:
            self.status_text[launch_key] = text[:STATUS_TEXT_MAX]
        elif isinstance(text, str):
            self.status_text.pop(launch_key, None)

    # -- executing actions ------------------------------------------------------------

    def execute(self, key: str, actions: list[im.Action]) -> None:
        """Carry out ``actions`` of instance ``key``'s machine: what a transition asked
        for, or what an adopted instance resumes with (backend.adopt)."""
        inst = self.instances[key]
        for a in actions:
            if isinstance(a, im.Launch):
                self.before_launch(key, inst)
                self._spawn(self.mutations.launch(key, inst, a.launch_key))
            elif isinstance(a, im.Stop):
                self._spawn(self.mutations.stop(key, a.launch_key))
            elif isinstance(a, im.StartTimer):
                self._arm(key, a.name, a.delay)
            elif isinstance(a, im.CancelTimer):
                handle = self._timers.pop((key, a.name), None)
                if handle is not None:
                    handle.cancel()
            elif isinstance(a, im.StartReadiness):
                self.checks.start_readiness(key, inst)
            elif isinstance(a, im.StopReadiness):
                self.checks.stop_readiness(key)
            elif isinstance(a, im.StartHealth):
                self.checks.start_health(key, inst)
            elif isinstance(a, im.StopHealth):
                self.checks.stop_health(key)
            elif isinstance(a, im.Report):
                log.info("%s: %s", key, a.outcome)
                if a.outcome is im.Outcome.START_LIMIT_HIT:
                    self._spawn(self.mutations.note(inst, _gave_up(inst)))

    def _arm(self, key: str, name: im.Timer, delay: float) -> None:
        old = self._timers.pop((key, name), None)
        if old is not None:
            old.cancel()

        def fire() -> None:
            self._timers.pop((key, name), None)
            self.feed(key, im.TIMER_EVENTS[name])
        self._timers[(key, name)] = asyncio.get_running_loop().call_later(delay, fire)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        spawn(self._tasks, coro, log, "reconciler")

    def freeze(self) -> None:
        """Stop deciding anything new (drain for a handoff). Only answers of owner calls
        already in flight are still applied — they cannot be derived again. Timer
        deadlines stay in the instances; exits stay in the owner's observation stream
        after the last processed cursor; probes are re-run: so whoever continues (this
        generation after an abort, or the next one) loses nothing."""
        self.frozen = True
        self._cancel_timers()

    def _cancel_timers(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()

    def thaw(self) -> None:
        """Resume after an aborted handoff: timers and probes as after a restore. A no-op
        when not frozen (a drain that timed out before freezing)."""
        if not self.frozen:
            return
        self.frozen = False
        t = now()
        for key, inst in self.instances.items():
            self.execute(key, inst.resume(t))

    # -- desired state ----------------------------------------------------------------

    def ensure(self, app: App, index: int, want_up: bool | None) -> str:
        """Create the instance if needed (with ``app`` as its definition) and want it up
        or down; ``None``: its start is deferred (:attr:`deferred`)."""
        key = instance_key(app.stack, app.name, index)
        inst = self.instances.get(key)
        if inst is None:
            inst = self.instances[key] = im.Instance(app, index, self.retired.get(key, 0))
            self.removed.pop(key, None)
        else:
            self.take_app(key, app)
        if want_up is None:
            self.deferred.add(key)
        else:
            self.feed(key, im.Start() if want_up else im.StopRequested())
        return key

    def release_deferred(self, config: Config, stopped_stacks: Iterable[str], why: str
                         ) -> list[str]:
        """Start the deferred instances nothing decided (still stopped, their stack not
        stopped, their app still in ``config``), on ``config``'s definition of their
        app; none is deferred after this. Returns the keys started."""
        keys, self.deferred = sorted(self.deferred), set()
        if self.fenced:
            return []
        held, started = frozenset(stopped_stacks), []
        for key in keys:
            inst = self.instances.get(key)
            app = None if inst is None else config.app(inst.app.stack, inst.app.name)
            if inst is None or app is None or inst.state is not im.State.STOPPED \
                    or app.stack in held:
                continue
            if app.definition_digest() != inst.app.definition_digest():
                self.take_app(key, app)   # the applied config's, as a relaunch would run
            self.feed(key, im.Start())
            started.append(key)
        if started:
            log.info("%d deferred instances start (%s): %s", len(started), why, started[:10])
        return started

    def take_app(self, key: str, app: App) -> None:
        """Instance ``key`` runs on ``app`` from now on (a policy change: its process
        keeps running); its health check, or its backoff, follows at once
        (Instance.take_app), a change of state recorded as an event's would be."""
        inst = self.instances[key]
        self._transition(key, inst, None, lambda: inst.take_app(app, now()))

    def forget(self, key: str) -> None:
        """Instance ``key`` is removed (its app taken out, scaled away): retired, and
        nothing kept of it in memory (an app renamed at every deploy grew each of these
        by an entry per removed instance for as long as the generation served)."""
        self.starts.forget(key)
        inst = self.instances.pop(key, None)
        if inst is not None:
            self.retire(key, inst.generation)
            self.dirty.discard(key)
            self._drop_launch(key, inst.launch_key)
        if self.events is not None:
            self.events.exits_told.pop(key, None)

    def _drop_launch(self, key: str, launch_key: str) -> None:
        """Forget what is kept of instance ``key``'s launch ``launch_key`` (it moved on to
        another launch, or was removed)."""
        if self.by_launch.get(launch_key) == key:
            del self.by_launch[launch_key]
        self.status_text.pop(launch_key, None)

    def retire(self, key: str, generation: int, *, save: bool = True) -> None:
        """Record that instance ``key`` launched up to ``generation`` and is gone: an
        instance added back under the key starts after it. A floor never goes down (an
        older release's instance may have counted from 0 again). ``save``: write it with
        the next save, which also drops the key's saved instance."""
        self.retired[key] = max(self.retired.get(key, 0), generation)
        if save:
            self.removed[key] = self.retired[key]

    def keys_of(self, config: Config) -> dict[str, tuple[App, int]]:
        return {instance_key(a.stack, a.name, i): (a, i) for a in config.apps()
                for i in range(a.instances)}

    # -- reporting --------------------------------------------------------------------

    def quiet(self) -> bool:
        busy = {im.State.STARTING, im.State.STOPPING, im.State.RESTARTING}
        return self.in_flight == 0 and not self.deferred \
            and not any(i.state in busy for i in self.instances.values())

    def inventory(self) -> list[dict[str, Any]]:
        """What a checkpoint and its verification compare: every instance with a process."""
        return sorted(({"stack": i.app.stack, "app": i.app.name, "instance": i.index,
                        "generation": i.generation, "launch_key": i.launch_key,
                        "pid": i.pid, "start_ticks": i.start_ticks, "restarts": i.restarts,
                        "state": str(i.state)}
                       for i in self.instances.values() if i.pid is not None),
                      key=lambda r: r["launch_key"])

    async def aclose(self) -> None:
        self.starts.clear("the backend is closing", durable=False)
        self._cancel_timers()
        await self.checks.aclose()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class _Held:
    """The instances whose start waits: for their ``after`` apps (``starts``), or for a
    step of an open operation (``step_start``); what start_order.waits_for reads."""

    def __init__(self, starts: StartWaits, step_start: Callable[[str], str | None]
                 ) -> None:
        self._starts, self._step_start = starts, step_start

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in self._starts
                                          or self._step_start(key) is not None)


def _gave_up(inst: im.Instance) -> str:
    """The tenure line for an app whose start limit was hit."""
    limit = inst.app.start_limit
    why = explain.last_run(inst)
    return (f"start limit hit ({limit.burst} starts within {limit.interval:g}s), not "
            f"restarting{': ' + why if why and why != 'start limit hit' else ''}")
