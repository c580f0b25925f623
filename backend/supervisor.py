"""The reconciler: drives every app instance's state machine against the owner.

It owns all I/O the machines ask for: owner RPC (launch, stop) with the current epoch,
timers, readiness and health probes (through backend.checks). Events come from the
owner's observation stream (exits, notify messages), from RPC results and from timers
and probes — never from polling the inventory.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from protocol.aclient import NotSent
from protocol.errors import (
    BadRequest,
    ConnectFailed,
    Internal,
    LaunchFailed,
    NotFound,
    OwnerChanged,
    ShuttingDown,
    StackFenced,
    StaleEpoch,
    StorageFailed,
    TenureError,
    TransportLost,
    UnknownMethod,
)
from protocol.storage import storage_failure

from . import activation, explain
from . import instance as im
from .after_stop import DOWN, Journal, StartsAfterStop, Wait, WaitKind
from .checks import Checks
from .enforce import app_env, launch_fields
from .events import Before, EventLog, transition_events
from .left_behind import announce, stop_left_behind
from .model import App, Config, ReadyKind
from .start_order import ORDER_WAIT, waits_for
from .tasks import spawn
from .waiters import Waiters

__all__ = ["OwnerCalls", "Supervisor", "instance_key"]

log = logging.getLogger("tenure.backend")

BASE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ", "HOME", "USER", "LOGNAME")


_RPC_RESULTS = (im.Launched, im.LaunchFailed, im.Stopped)
_INTENTS = (im.Start, im.StopRequested)
_ENDED = ("exited", "lost")   # owner launch states of a key that cannot run again
STATUS_TEXT_MAX = 200         # characters of an app's STATUS= kept (as the owner does)
LAUNCH_TRIES = 5              # a launch the owner answers with an error is given up after
OWNER_AWAY_POLL_S = 1.0       # and one that no owner can take asked again this often


class OwnerCalls(Protocol):
    """What the reconciler needs of the owner connection (protocol.aclient.AsyncClient;
    backend.testing.FakeOwner in unit tests)."""

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   epoch: int | None = None, timeout: float | None = None,
                   still: Callable[[], bool] | None = None) -> Any: ...


def _fenced_off(key: str) -> ShuttingDown:
    return ShuttingDown(f"{key}: this backend generation is fenced off (a newer one holds "
                        "the owner)", {"instance": key})


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
        self._on_mutation = on_mutation or (lambda method: None)
        self._sleep = sleep
        self.owner_notes = True                  # False: the owner predates logNotes 1
        self.base_env = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ}
        self.owner_capabilities: Mapping[str, int] = {}  # from the owner's welcome
        self.checks = Checks(owner, self.instances, self.feed,
                             lambda: self.owner_capabilities, lambda: self.base_env,
                             self._spawn)
        self.events: EventLog | None = None      # where transitions are recorded
        # starts wanted once an instance is down; a newer generation's claim fences us
        self._after_stop = StartsAfterStop(on_stale=lambda why: self.fence(why))
        self._stop_trouble: dict[str, str] = {}  # launch key -> why its stop is retried
        self._launch_trouble: dict[str, str] = {}   # and why its launch waits (storage)
        self._stop_sent: dict[str, float] = {}   # launch key -> first stop sent (monotonic)
        # instance key -> done once what its last run left running is stopped: its next
        # launch waits for it (docs/config.md, stop)
        self._left: dict[str, tuple[int, asyncio.Future[None]]] = {}
        self._stops_fed: dict[str, int] = {}     # instance key -> stops fed (stopped_since)
        self._starts_fed: dict[str, int] = {}    # instance key -> starts wanted (started_since)
        # told once when this generation learns it is fenced (backend.generation)
        self.on_fenced: Callable[[str], None] = lambda why: None
        # whether the owner answers this generation (backend.generation: its owner link)
        self.owner_answers: Callable[[], bool] = lambda: True
        # saves the instances before a stop is sent (backend.generation: backend.db), so
        # that a generation recovered after a crash knows the stop was asked
        self.save_before_stop: Callable[[], None] = lambda: None
        self._calls: dict[object, tuple[str, str, float]] = {}   # in flight: what, key, since
        # instances whose start waits for a config queued before this generation began
        # (backend.generation: `tenure up --config` on a home whose daemons were down):
        # not saved while they wait, so backend.db keeps them as they were; any event
        # fed to one decides it (the queued config's operation, `tenure stop`, ...)
        self.deferred: set[str] = set()

    @property
    def in_flight(self) -> int:
        """Owner mutations sent and not answered yet: a drain waits for zero."""
        return len(self._calls)

    def fence(self, why: str) -> None:
        """A newer generation holds the owner: never act again, and say so once. Every
        place that learns it (an owner call refused with STALE_EPOCH, an epoch read
        from the owner) calls this."""
        if self.fenced:
            return
        self.fenced = True
        log.warning("fenced: %s", why)
        self._cancel_timers()
        self._after_stop.clear("this generation is fenced off", durable=True)
        self.on_fenced(why)

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
                raise _fenced_off(key)
            return
        if self.frozen and not isinstance(event, _RPC_RESULTS):
            if isinstance(event, _INTENTS):
                raise ShuttingDown(f"{key}: {type(event).__name__} while frozen for a "
                                   "handoff", {"instance": key})
            return  # re-derived after thaw or by the next generation (see freeze)
        if isinstance(event, im.Start):
            self._starts_fed[key] = self._starts_fed.get(key, 0) + 1
            if self._held_for_order(key, inst):
                return
        self._apply(key, inst, event)

    def _apply(self, key: str, inst: im.Instance, event: im.Event) -> None:
        self.deferred.discard(key)
        if isinstance(event, im.StopRequested):   # the latest intent wins
            self._after_stop.withdraw(key, "a stop was asked after it")
            self._stops_fed[key] = self._stops_fed.get(key, 0) + 1
        self._transition(key, inst, event, lambda: inst.handle(event, now()))

    def _transition(self, key: str, inst: im.Instance, event: im.Event | None,
                    change: Callable[[], list[im.Action]]) -> None:
        """Make one ``change`` to instance ``key`` (an ``event`` handled, or its app
        taken: None) and follow it through: recorded as events, saved, its actions
        executed, waiters woken, what waited for its state looked at again."""
        was = Before(inst) if self.events is not None else None
        launch_key = inst.launch_key
        actions = change()
        if self.events is not None and was is not None:
            transition_events(self.events, key, inst, event, was)
        if inst.launch_key != launch_key:   # its events are ignored (on_observation)
            self._drop_launch(key, launch_key)
        self.by_launch[inst.launch_key] = key
        self.dirty.add(key)
        self._execute(key, actions)
        self._notify()
        self._start_if_down(key)
        self._recheck_order(inst)

    def _held_for_order(self, key: str, inst: im.Instance) -> bool:
        """Whether the start of ``key`` waits (backend.start_order): each start of an
        instance with ``after`` apps is looked at one loop turn later, once every start
        fed in this turn (its dependencies' too) has been. A start that cannot be
        recorded in backend.db is not held: it goes now, unordered, rather than lost;
        raises ShuttingDown, nothing done, when that write found a newer generation's
        claim (this one is fenced then)."""
        if inst.state not in DOWN or not inst.app.after:
            return False
        if key not in self._after_stop:
            try:
                self._hold_for_order(key, time.time() + ORDER_WAIT)
            except Exception as exc:
                if self.fenced:   # a newer generation claimed backend.db: it starts it
                    raise _fenced_off(key) from None
                log.error("%s: its start could not be recorded to wait for %s (%s); "
                          "starting it now", key, ", ".join(inst.app.after), exc)
                return False
        asyncio.get_running_loop().call_soon(self._start_now, key)
        return True

    def _hold_for_order(self, key: str, deadline: float) -> None:
        """Record and arm the start of ``key`` as waiting for its ``after`` apps until
        ``deadline`` (wall clock, saved with it: a generation that takes it over waits
        only for what is left), ORDER_WAIT at most. Raises what recording it raises:
        then nothing is armed."""
        within = min(max(deadline - time.time(), 0.0), ORDER_WAIT)
        self._after_stop.record(key, Wait(WaitKind.ORDER, deadline))
        self._after_stop.arm(key, within, lambda: self._expire(key, ORDER_WAIT))

    def resume_order_wait(self, key: str, deadline: float) -> None:
        """Take over the start of ``key`` a previous generation held for its ``after``
        apps: it waits for them as it did there, until ``deadline`` (not ORDER_WAIT
        afresh), and starts once none is on its way up, or then all the same. One
        already pending is left as it is. Raises ShuttingDown fenced off, and what
        recording it raises (then nothing is armed)."""
        if key in self._after_stop:
            return
        if self.fenced:
            raise _fenced_off(key)
        self._hold_for_order(key, deadline)
        asyncio.get_running_loop().call_soon(self._start_now, key)

    def stopped_since(self, keys: list[str]) -> Callable[[], list[str]]:
        """A check, for a waiter that wants ``keys`` up: which of them a stop was asked
        of since this call (the latest intent wins: the wait for them is over)."""
        fed = {k: self._stops_fed.get(k, 0) for k in keys}
        return lambda: [k for k in keys if self._stops_fed.get(k, 0) != fed[k]]

    def started_since(self, keys: list[str]) -> Callable[[], list[str]]:
        """A check, for a command that wants ``keys`` down: which of them a start (or a
        restart) was asked of since this call (the latest intent wins)."""
        fed = {k: self._starts_fed.get(k, 0) for k in keys}
        return lambda: [k for k in keys if self._starts_fed.get(k, 0) != fed[k]]

    def reason(self, key: str) -> str | None:
        """Instance ``key``'s one-line reason as status gives it: explain.reason, then
        what only this reconciler knows (:meth:`why`)."""
        return "; ".join(filter(None, (explain.reason(self.instances[key]),
                                       self.why(key)))) or None

    def why(self, key: str) -> str | None:
        """What explain.reason cannot say of instance ``key``: that what its last run
        left running is being stopped (its next launch waits for that), why a stopped
        one is not started (its start waits for its ``after`` apps, or it was never
        started: an apply that added it failed before its step, say), or why a stopping
        one's stop is being tried again; None otherwise."""
        inst = self.instances[key]
        left = self._left.get(key)
        if left is not None:   # said beside why the run ended (explain.reason)
            said = f"stopping {left[0]} process(es) the last run left running"
            return said if inst.state is not im.State.STARTING else \
                "; ".join(filter(None, (_last_run(inst), said)))
        if inst.state in (im.State.STOPPING, im.State.RESTARTING):
            return self._stop_trouble.get(inst.launch_key) or self._stopping(inst)
        if inst.state is im.State.STARTING:
            return self._launch_trouble.get(inst.launch_key)
        if inst.state is not im.State.STOPPED:
            return None
        if key in self._after_stop:
            deps = waits_for(self.instances, self._after_stop.waiting(), key)
            return f"starts once {', '.join(deps)} {'is' if len(deps) == 1 else 'are'} " \
                   "ready" if deps else None
        return None if inst.started else "never started"

    def _recheck_order(self, changed: im.Instance) -> None:
        """Look again at the waiting starts of instances that start after ``changed``'s
        app."""
        app = changed.app
        for key in self._after_stop.waiting():
            waiting = self.instances.get(key)
            if waiting is not None and waiting.app.stack == app.stack \
                    and app.name in waiting.app.after:
                asyncio.get_running_loop().call_soon(self._start_now, key)

    def _expire(self, key: str, within: float) -> None:
        """A pending start's time is up: an instance still not down is left as it is
        (withdrawn); one that is down but whose ``after`` apps are still coming up
        starts all the same (ordering, not a requirement)."""
        inst = self.instances.get(key)
        if self.frozen:   # kept for after the thaw, or for the next generation (journal)
            return
        if inst is None or inst.state not in DOWN or self.fenced:
            self._after_stop.withdraw(key, f"not down within {within:g} s", logging.WARNING)
            return
        log.warning("%s: %s not ready after %g s; starting it all the same", key,
                    ", ".join(waits_for(self.instances, self._after_stop.waiting(), key)), within)
        self._after_stop.take(key, lambda: self._apply(key, inst, im.Start()))

    def start_when_down(self, key: str, within: float, *, stop: bool = False
                        ) -> asyncio.Future[bool]:
        """Feed ``Start`` to ``key`` once it is down (soon if it is), after feeding it
        ``StopRequested`` first with ``stop``. The future says True once it was started,
        False when withdrawn: by a ``StopRequested`` fed after this (a later stop wins),
        when the instance is forgotten, or when it is not down within ``within``
        seconds. One per instance: asked again while one is pending, the same future
        (backend.after_stop). The start is recorded in backend.db before the stop is
        fed; raises what that write raises, and then nothing was done."""
        pending = self._after_stop.get(key)
        if pending is not None:
            return pending
        if self.fenced:
            raise _fenced_off(key)
        self._after_stop.record(key, Wait(WaitKind.AFTER_STOP, time.time() + within))
        self._starts_fed[key] = self._starts_fed.get(key, 0) + 1
        if stop:
            self.feed(key, im.StopRequested())
        started = self._after_stop.arm(key, within, lambda: self._expire(key, within))
        self._start_if_down(key)
        return started

    def keep_starts_in(self, journal: Journal, activation: str) -> None:
        """Record every start wanted once down in ``journal`` (backend.db) from now on,
        as generation ``activation``'s."""
        self._after_stop.journal = journal
        self._after_stop.activation = activation

    def pending_start(self, key: str) -> asyncio.Future[bool] | None:
        """The start of ``key`` wanted once it is down, while one is pending."""
        return self._after_stop.get(key)

    def _start_if_down(self, key: str) -> None:
        inst = self.instances.get(key)
        if key in self._after_stop and inst is not None and inst.state in DOWN:
            # One turn later: every waiter woken by this change sees the instance down
            # first (a `tenure stop` waiting for it answers `stopped`).
            asyncio.get_running_loop().call_soon(self._start_now, key)

    def _start_now(self, key: str) -> None:
        inst = self.instances.get(key)
        if key not in self._after_stop or inst is None or self.fenced:
            return   # withdrawn meanwhile, or taken by an earlier turn
        if inst.state not in DOWN:   # up again meanwhile: another start took it up
            self._after_stop.take(key, lambda: None)
        elif self.frozen or waits_for(self.instances, self._after_stop.waiting(), key):
            return   # kept: looked at again when a dependency changes (or after a thaw)
        else:
            self._after_stop.take(key, lambda: self._apply(key, inst, im.Start()))

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
                self._stop_left_behind(key, e["launch_key"], e["descendants"])
            ended = im.OwnerStopped if e.get("stopped") is True else im.Exited
            pid, left = e.get("pid"), e.get("descendants")
            self.feed(key, ended(e.get("exit_code"), e.get("signal"),
                                 e.get("core_dumped") is True,
                                 pid if isinstance(pid, int) else None,
                                 left if isinstance(left, int) else 0))
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

    def _execute(self, key: str, actions: list[im.Action]) -> None:
        inst = self.instances[key]
        for a in actions:
            if isinstance(a, im.Launch):
                self._spawn(self._mutate(key, a.launch_key,
                                         functools.partial(self._launch, inst, a.launch_key),
                                         "launch"))
            elif isinstance(a, im.Stop):
                self._spawn(self._mutate(key, a.launch_key,
                                         functools.partial(self._stop, a.launch_key), "stop"))
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
                    self._spawn(self._note(inst, _gave_up(inst)))

    def _arm(self, key: str, name: im.Timer, delay: float) -> None:
        old = self._timers.pop((key, name), None)
        if old is not None:
            old.cancel()

        def fire() -> None:
            self._timers.pop((key, name), None)
            self.feed(key, im.TIMER_EVENTS[name])
        self._timers[(key, name)] = asyncio.get_running_loop().call_later(delay, fire)

    async def _mutate(self, key: str, launch_key: str,
                      op: Callable[[], Awaitable[im.Event | None]], what: str) -> None:
        """Run one owner mutation (``what``: launch, stop); feed its result if the
        instance is still on that launch. ``in_flight`` counts it until it ended, whatever
        it raised: a drain waits for zero, and names what it waited for
        (:meth:`in_flight_calls`). A fenced backend stops acting for good."""
        if self.fenced:
            return
        token = object()
        self._calls[token] = (what, launch_key, time.monotonic())
        event: im.Event | None = None
        try:
            event = await op()
        except StaleEpoch as exc:
            self.fence(f"the owner refused a call: {exc.msg}")
        finally:
            del self._calls[token]
            self._notify()
        inst = self.instances.get(key)
        if event is not None and inst is not None and inst.launch_key == launch_key:
            self.feed(key, event)

    def in_flight_calls(self) -> list[str]:
        """The owner calls in flight, oldest first: ``stop s/a/0/3 (for 12.5 s)``."""
        t = time.monotonic()
        return [f"{what} {key} (for {t - since:.1f} s)"
                for what, key, since in sorted(self._calls.values(), key=lambda c: c[2])]

    def _invalidate(self, method: str) -> None:
        """The certificate stops vouching before ``method`` is sent. Raises Internal when
        that failed: the call must not be sent (the caller retries it)."""
        try:
            self._on_mutation(method)
        except Exception as exc:  # whatever broke, the certificate may still vouch
            what = f"invalidating the recovery certificate before {method}"
            failed = storage_failure(exc, what) or \
                Internal(f"{what} failed: {exc}")
            failed.data.update(method=method, not_sent=True)   # the owner was not asked
            raise failed from exc

    async def _launch(self, inst: im.Instance, launch_key: str) -> im.Event | None:
        app = inst.app
        key = f"{app.stack}/{app.name}/{inst.index}"
        if self.leaving(key):
            await self._left_stopped(key)
        env = {**app_env(self.base_env, app), "TENURE_STACK": app.stack,
               "TENURE_APP": app.name, "TENURE_INSTANCE": str(inst.index)}
        params = {"launch_key": launch_key, "stack": app.stack, "app": app.name,
                  "instance": inst.index, "generation": inst.generation,
                  "argv": list(app.command), "env": env, "cwd": app.cwd,
                  "stop": app.stop.to_wire(), **launch_fields(app),
                  **activation.launch_sockets(app)}
        if (app.sockets or app.fd_store_max) and \
                self.owner_capabilities.get("sockets") != activation.CAPABILITY["sockets"]:
            # an older owner would ignore the keys and start the app without its fds
            log.warning("%s: the owner predates socket activation", launch_key)
            return im.LaunchFailed("CAPABILITY_MISSING")
        try:
            return await self._launch_tries(inst, key, launch_key, params)
        finally:
            self._launch_trouble.pop(launch_key, None)

    async def _launch_tries(self, inst: im.Instance, key: str, launch_key: str,
                            params: dict[str, Any]) -> im.Event | None:
        """Send the launch until the owner answers it, at most LAUNCH_TRIES times; no
        try is spent while no owner can take it, or while a full or failing disk keeps
        it from being recorded (the backend's own write before it, or the owner's row):
        neither is the app's failure. A try spent there made an app that exited on a
        full disk `failed` (start limit) within seconds, its RESTARTS counting launches
        never sent."""
        last: TenureError = TransportLost("no attempt was made")
        tries, waiting = 0, False
        while tries < LAUNCH_TRIES and not self.fenced:  # a launch key is idempotent:
            if not self._still_starting(key, inst, launch_key):   # retrying is safe
                log.info("%s: not launched: the instance was stopped or started anew "
                         "while its launch waited", launch_key)
                return None
            try:
                self._invalidate("launch")
                # asked again once its turn among the owner calls came (a stack stop may
                # hold them all meanwhile): a stop asked while it waited withdraws it
                r = await self.owner.call("launch", params, epoch=self.epoch, still=(
                    lambda: self._still_starting(key, inst, launch_key)))
                if r.get("state") in _ENDED:
                    return self._spent(launch_key, r, params["generation"])
                if not isinstance(r.get("pid"), int) or not isinstance(r.get("start_ticks"),
                                                                       int):
                    # a row an earlier try left 'starting' (its failure could not be
                    # recorded: a full disk): no process runs under the key
                    failed = LaunchFailed(f"{launch_key}: the owner holds no process for "
                                          f"it (its row says {r.get('state')})",
                                          {"launch_key": launch_key})
                    return im.LaunchFailed(failed.code_str, explain.launch_error(
                        failed, params["generation"]))
                return im.Launched(r["pid"], r["start_ticks"])
            except StaleEpoch:
                raise
            except NotSent:
                log.info("%s: not launched: the instance was stopped or started anew "
                         "while its launch waited for its turn", launch_key)
                return None
            except (LaunchFailed, StackFenced, BadRequest) as exc:
                log.warning("%s: launch refused: %s", launch_key, exc)
                return im.LaunchFailed(exc.code_str,
                                       explain.launch_error(exc, params["generation"]))
            except TenureError as exc:  # not sent, unknown outcome, owner away: retry
                last = exc
                if isinstance(exc, StorageFailed):   # nothing was launched: wait
                    said = explain.not_done(exc, params["generation"]).text
                    if self._launch_trouble.get(launch_key) is None:
                        log.error("%s: %s; tried again each second", launch_key, said)
                    self._launch_trouble[launch_key] = f"{said}; trying again each second"
                    await self._sleep(1.0)
                    continue
                if self.owner_away(exc):
                    # Not the app's failure: no attempt is spent while no owner can
                    # take the launch (it ends if this generation is fenced)
                    if not waiting:
                        log.warning("%s: the owner is away (%s); the launch waits for "
                                    "it", launch_key, exc)
                    waiting = True
                    await self._sleep(OWNER_AWAY_POLL_S)
                    continue
                tries += 1
                log.warning("%s: launch not done (%s); retrying", launch_key, exc)
                await self._sleep(0.5)
        if self.fenced:
            return None
        return im.LaunchFailed(last.code_str, explain.not_done(last, params["generation"]))

    def owner_away(self, exc: TenureError) -> bool:
        """Whether a launch that failed with ``exc`` found no owner to take it: none
        listens, it is shutting down, another instance answers (this generation is then
        replaced), or the owner link is not connected (a hung or restarting owner)."""
        return isinstance(exc, ConnectFailed | ShuttingDown | OwnerChanged) or \
            not self.owner_answers()

    def _spent(self, launch_key: str, row: dict[str, Any], generation: int) -> im.Event:
        """The owner's answer for a launch key it had used before (this backend's state
        is older than the owner's: backend.db lost, or an older checkpoint), whose launch
        has ended: it is reported as it was, started and ended, never as running; the
        exit follows the start as its observation would (an observation of it that
        comes first makes this one stale, ignored)."""
        log.warning("%s: launch key used before; that launch is %s", launch_key,
                    row["state"])
        if not isinstance(row.get("pid"), int) or not isinstance(row.get("start_ticks"), int):
            return im.LaunchFailed("CONFLICT", explain.spent_key(launch_key, row["state"],
                                                                 generation))
        ended = row.get("exit") or {}
        asyncio.get_running_loop().call_soon(self.on_observation, {
            "kind": "exit", "launch_key": launch_key, "exit_code": ended.get("exit_code"),
            "signal": ended.get("signal"), "core_dumped": ended.get("core_dumped")})
        return im.Launched(row["pid"], row["start_ticks"])

    async def _note(self, inst: im.Instance, text: str) -> None:
        """A tenure line in the app's own log stream (owner ``logs.note``). Best effort:
        an owner that predates logNotes 1 is asked once, then never again."""
        if self.fenced or not self.owner_notes:
            return
        app = inst.app
        try:
            await self.owner.call("logs.note", {
                "stack": app.stack, "app": app.name, "instance": inst.index,
                "generation": inst.generation, "text": text}, epoch=self.epoch)
        except UnknownMethod:
            self.owner_notes = False
            log.info("the owner predates logNotes 1: no tenure lines in app logs")
        except TenureError as exc:
            log.warning("%s: could not write %r to its log: %s", inst.launch_key, text, exc)

    async def retune_sockets(self, app: App) -> None:
        """Have the owner give ``app``'s held sockets their configured backlog, mode and
        owner now (backend.activation.retune). Raises what the owner raised
        (SocketUnavailable: the operation fails, naming the socket) and ShuttingDown
        once fenced."""
        if self.fenced:
            raise _fenced_off(app.key)
        try:
            await activation.retune(self.owner, self.epoch, app)
        except StaleEpoch as exc:
            self.fence(f"the owner refused a socket update: {exc.msg}")
            raise

    async def sweep_sockets(self, config: Config) -> None:
        """Let the owner close the sockets and fd stores ``config`` no longer names
        (backend.activation.sweep). Raises nothing."""
        if self.fenced or self.owner_capabilities.get("sockets") != \
                activation.CAPABILITY["sockets"]:
            return
        try:
            done = await activation.sweep(self.owner, self.epoch, config)
        except StaleEpoch as exc:
            self.fence(f"the owner refused the socket sweep: {exc.msg}")
            return
        except Exception:
            log.exception("sockets: the sweep failed")
            return
        if any(done.values()):
            log.info("sockets: closed %(closed)d, fd stores cleared %(cleared)d", done)

    def _stop_left_behind(self, key: str, launch_key: str, count: int) -> None:
        """Stop what outlived an exited launch's leader (its process group and tracked
        descendants) with the app's stop policy (backend.left_behind): the instance's
        next launch waits until that stop ended (a restart must not run beside it), and
        meanwhile its reason says so (``why``)."""
        announce(log, key, count, launch_key)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._left[key] = (count, done)

        async def stop() -> None:
            await stop_left_behind(self.owner, self.epoch, launch_key, key, log,
                                   lambda: self._invalidate("stop"))   # StaleEpoch: fenced

        async def stop_then_go() -> None:
            try:
                await self._mutate(key, launch_key, stop, "left-running stop")
            finally:
                done.set_result(None)
                if self._left.get(key, (0, None))[1] is done:
                    del self._left[key]
                self._notify()
        self._spawn(stop_then_go())

    def leaving(self, key: str) -> bool:
        """Whether what the last run of ``key`` left running is being stopped."""
        return key in self._left

    async def _left_stopped(self, key: str) -> None:
        """Once what the last run of ``key`` left running is stopped (at once when it
        left nothing)."""
        while (left := self._left.get(key)) is not None:
            await asyncio.shield(left[1])

    def _still_starting(self, key: str, inst: im.Instance, launch_key: str) -> bool:
        """Whether ``inst`` still waits for the launch of ``launch_key``, asked before
        each attempt to send it. A stop asked while the launch waited (for what the last
        run left running, for an owner away, to be tried again) found no process under
        the key (the owner had not seen it: NotFound, so the instance is stopped), and a
        restart gave it a new key: sent after that, the launch would run a process
        nobody tracks."""
        return self.instances.get(key) is inst and inst.launch_key == launch_key \
            and inst.state is im.State.STARTING

    async def _stop(self, launch_key: str) -> im.Event | None:
        """Stop ``launch_key``, asked again each second until the owner confirms it;
        meanwhile the last failure is the instance's reason (``why``)."""
        try:
            while not self.fenced:
                try:
                    self._invalidate("stop")
                    self._save_stopping(launch_key)
                    self._stop_sent.setdefault(launch_key, time.monotonic())
                    done = await self.owner.call("stop", {"launch_key": launch_key},
                                                 epoch=self.epoch, timeout=3600)
                    ended = done.get("exit") if isinstance(done, dict) else None
                    return im.Stopped(ended if isinstance(ended, dict) else None)
                except NotFound:
                    if self._launch_in_flight(launch_key):   # not seen by the owner yet
                        await self.wait(lambda: not self._launch_in_flight(launch_key),
                                        None)
                        continue   # asked again: its answer had a process, or not
                    return im.Stopped()   # no process: already gone
                except StaleEpoch:
                    raise
                except TenureError as exc:  # not sent, unknown outcome, owner away: again
                    log.error("%s: stop not confirmed (%s); trying again", launch_key, exc)
                    self._stop_trouble[launch_key] = explain.stop_unconfirmed(exc)
                    await self._sleep(1.0)
            return None
        finally:
            self._stop_trouble.pop(launch_key, None)
            self._stop_sent.pop(launch_key, None)

    def _stopping(self, inst: im.Instance) -> str | None:
        """``SIGTERM sent 12s ago; SIGKILL in 8s`` (then ``SIGKILL sent 3s ago``) while
        the owner carries out the stop of ``inst``'s launch, by the app's stop policy:
        an app that ignores its stop signal showed `stopping` with nothing said for the
        whole timeout. None before the stop was sent, and while the owner does not
        answer (what it does then is not known)."""
        since = self._stop_sent.get(inst.launch_key)
        if since is None or not self.owner_answers():
            return None
        stop, took = inst.app.stop, time.monotonic() - since
        sig = f"SIG{stop.signal}"
        if sig == "SIGKILL":
            return f"SIGKILL sent {took:.0f}s ago"
        if took < stop.timeout:
            return f"{sig} sent {took:.0f}s ago; SIGKILL in {stop.timeout - took:.0f}s"
        return f"{sig} sent {took:.0f}s ago; SIGKILL sent {took - stop.timeout:.0f}s ago"

    def _launch_in_flight(self, launch_key: str) -> bool:
        """Whether a launch of ``launch_key`` is being sent to the owner: an owner that
        predates waiting for it answers a stop of the key NotFound until it has spawned
        the process, and a stop that took that for 'gone' left the process untracked."""
        return any(what == "launch" and key == launch_key
                   for what, key, _since in self._calls.values())

    def _save_stopping(self, launch_key: str) -> None:
        """Save the instances (the one being stopped among them) before its stop is
        sent: a generation that recovers after a crash then finds it stopping, and
        leaves it stopped, instead of taking the owner's word that it stopped for a stop
        of the owner's own, and starting it again. A save that fails is logged; the stop
        goes on (a stop undone by a crash is the lesser harm)."""
        try:
            self.save_before_stop()
        except Exception as exc:  # the stop must not wait on the disk
            log.warning("%s: the stop could not be saved before it was sent (%s)",
                        launch_key, exc)

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
            self._execute(key, inst.resume(t))

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
        self._after_stop.withdraw(key, "the instance is removed")
        inst = self.instances.pop(key, None)
        if inst is not None:
            self.retire(key, inst.generation)
            self.dirty.discard(key)
            self._drop_launch(key, inst.launch_key)
        self._stops_fed.pop(key, None)
        self._starts_fed.pop(key, None)
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
        self._after_stop.clear("the backend is closing", durable=False)
        self._cancel_timers()
        await self.checks.aclose()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _last_run(inst: im.Instance) -> str | None:
    """How the run before ``inst``'s launch under way ended, when it exited (a restart
    that waits for what that run left running): explain.reason says nothing of a
    starting instance."""
    ended = inst.last_exit
    return ended.text if ended is not None and ended.generation == inst.generation - 1 \
        else None


def _gave_up(inst: im.Instance) -> str:
    """The tenure line for an app whose start limit was hit."""
    limit = inst.app.start_limit
    why = explain.last_run(inst)
    return (f"start limit hit ({limit.burst} starts within {limit.interval:g}s), not "
            f"restarting{': ' + why if why and why != 'start limit hit' else ''}")
