"""The backend API's commands on instances: ``start``, ``stop`` and ``restart`` (rolling)
of a stack, an app or an instance, and how they wait for it to settle. A part of
backend.api.Api (it mixes this in), apart for size."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protocol.errors import NotFound, ShuttingDown, StackFenced
from protocol.server import Call
from protocol.window import refuse_in_window

from . import instance as im
from .after_stop import DOWN, after_stop_bound
from .start_order import stop_levels
from .stop_records import STOP_TIMEOUT, StopsToAsk
from .targets import known_near, select
from .tasks import spawn

if TYPE_CHECKING:
    from .generation import Generation
    from .steps import StepGate
    from .store import BackendStore
    from .supervisor import Supervisor

__all__ = ["UP", "InstanceCommands"]

log = logging.getLogger("tenure.backend")

UP = (im.State.READY, im.State.FAILED, im.State.EXITED)


class InstanceCommands:
    """What backend.api.Api gives these methods."""

    gen: Generation
    sup: Supervisor
    store: BackendStore
    gate: StepGate
    _cycles: set[asyncio.Future[Any]]
    stopped_stacks: Callable[[], set[str]]
    _require_owner: Callable[[str], None]
    _stops_kept: StopsToAsk | None = None   # made on first use (backend.stop_records)
    _stops_finisher: asyncio.Future[Any] | None = None   # resume_stops's, while it runs

    @property
    def _stops(self) -> StopsToAsk:
        """This generation's records of the stops still to ask."""
        if self._stops_kept is None:
            self._stops_kept = StopsToAsk(self.store, self.gen.activation,
                                          self.sup.fence)
        return self._stops_kept

    def _outside_window(self, call: Call) -> None:
        """Raises OperationInProgress while an owner maintenance window or a `tenure
        down` runs (protocol.window), unless the window itself asks."""
        if not call.params.get("window"):
            refuse_in_window(self.gen.layout.home, f"{call.method} {call.params['target']}")

    def _targets(self, target: str, create: bool = True) -> list[str]:
        """Instance keys for ``stack``, ``stack/app`` or ``stack/app/N``; with ``create``
        configured instances not yet known are created (stopped). NotFound if none."""
        keys = select(self.sup.instances, target)
        if not keys and create:
            config_keys = self.sup.keys_of(self.gen.config)
            keys = select(config_keys, target)
            for k in keys:
                app, index = config_keys[k]
                self.sup.ensure(app, index, False)
        if not keys:
            near = known_near([*self.sup.instances, *self.sup.keys_of(self.gen.config)],
                              target)
            raise NotFound(f"no stack, app or instance matches {target!r}{near}",
                           {"targets": [target]})
        return keys

    async def _wait_settled(self, keys: list[str], states: tuple[im.State, ...],
                            timeout: float | None, *, until_drain: bool,
                            moved: dict[str, int] | None = None,
                            deferred: dict[str, asyncio.Future[bool]] | None = None,
                            superseded: Callable[[], bool] | None = None
                            ) -> tuple[bool, dict[str, str]]:
        """Wait until every instance is in ``states`` (or, with ``until_drain``, a drain
        began). Returns whether they are, and their public states. With ``moved`` (key:
        its generation when asked) an instance launched again since also counts: it was
        down in between, and a later start took it up again at once. With ``deferred``
        (key: its start wanted once it is down) an instance whose start was withdrawn
        ends the wait for it, unsettled: it stays stopped. Waiting for an instance to be
        up, a stop asked meanwhile ends the wait for it too: the latest intent wins.
        ``superseded`` ends the whole wait once it holds (a later command took over:
        whoever wakes the reconciler's waiters when it changes)."""
        # waiting for them to be up, a stop asked meanwhile ends it (list: no check)
        stopped = self.sup.stopped_since(keys) if im.State.STOPPED not in states else list

        down = im.State.STOPPED in states   # and nothing of its last run left running

        def done(k: str) -> bool:
            inst = self.sup.instances[k]
            return (inst.state in states and not (down and self.sup.leaving(k))) or \
                (moved is not None and inst.generation != moved[k])

        def withdrawn(k: str) -> bool:
            f = (deferred or {}).get(k)
            return f is not None and f.done() and (f.cancelled() or not f.result())

        def settled() -> bool:
            return all(done(k) for k in keys if k in self.sup.instances)

        def ended() -> bool:
            if superseded is not None and superseded():
                return True
            gone = set(stopped())
            return all(done(k) or k in gone or withdrawn(k) for k in keys
                       if k in self.sup.instances)
        await self.sup.wait(lambda: ended() or (until_drain and self.gate.paused), timeout)
        return settled(), {k: str(self.sup.instances[k].public_state)
                           for k in keys if k in self.sup.instances}

    async def _settle(self, keys: list[str], states: tuple[im.State, ...], timeout: float,
                      what: str, moved: dict[str, int] | None = None,
                      deferred: dict[str, asyncio.Future[bool]] | None = None,
                      superseded: Callable[[], bool] | None = None) -> dict[str, Any]:
        """Wait for the instances of a change already made to settle (or, with
        ``superseded``, for a later command to take over). Raises ShuttingDown when a
        drain begins first: the change is in the instances and whoever continues (the
        next generation, or this one after an abort) carries it on, but this request
        cannot see it settle."""
        ok, public = await self._wait_settled(keys, states, timeout, until_drain=True,
                                              moved=moved, deferred=deferred,
                                              superseded=superseded)
        if not ok and self.gate.paused:
            raise ShuttingDown(f"a backend handoff began before {what} settled; the change "
                               "was made and goes on under the generation that serves "
                               "next (this one again if the handoff is aborted; see "
                               "`tenure status`)", {"instances": public})
        if ok:
            return {"settled": ok, "instances": public}
        # why each instance not there yet is not (a stop whose SIGKILL is 20 s away):
        # the answer said `(not settled in time)` and nothing more
        return {"settled": ok, "instances": public,
                "reasons": self._reasons(keys, states, moved)}

    def _reasons(self, keys: list[str], states: tuple[im.State, ...],
                 moved: dict[str, int] | None = None) -> dict[str, str]:
        """Why each of ``keys`` not settled in ``states`` is not (its status reason):
        not in them, or down while what its last run left running is being stopped; one
        launched again since (``moved``) counts as settled, as the wait counts it."""
        down = im.State.STOPPED in states
        out = {}
        for k in keys:
            inst = self.sup.instances.get(k)
            if inst is None or (moved is not None and inst.generation != moved[k]):
                continue
            if inst.state in states and not (down and self.sup.leaving(k)):
                continue
            why = self.sup.reason(k)
            if why is not None:
                out[k] = why
        return out

    def _refuse_stopped_stacks(self, keys: list[str]) -> None:
        stacks = sorted({k.split("/")[0] for k in keys} & self.stopped_stacks())
        if stacks:
            raise StackFenced(f"stack {', '.join(stacks)} is stopped; use `tenure stack "
                              "start` first", {"stacks": stacks})

    async def start(self, call: Call) -> Any:
        target, timeout = call.params["target"], call.params["timeout"]
        self._outside_window(call)
        keys = self._targets(target)
        self._refuse_stopped_stacks(keys)
        self._require_owner(f"start {target}")
        with self.gate.step(f"start {target}"):
            deferred = self._start_each(keys, "start", timeout)
        return await self._settle(keys, UP, timeout, f"start {target}", deferred=deferred)

    def _start_each(self, keys: list[str], what: str, timeout: float
                    ) -> dict[str, asyncio.Future[bool]]:
        """Start every instance of ``keys``: at once, or, while it is still stopping
        (the machine ignores a Start then; a stop of tenure's own for a restart is
        made a stop first), once it is down, as the step ``what KEY``.
        Returns the starts that wait (for that stop, or for their ``after`` apps) by
        key, for :meth:`_settle`: a withdrawn one ends the wait for its instance. Call
        it inside the request's step: a start after a stop continues it, so a drain
        that began since (during a ``stack start``'s intent write) lets it finish."""
        deferred: dict[str, asyncio.Future[bool]] = {}
        # the latest command wins after a crash too (backend.stop_records); one still
        # stopping is taken in _start_when_down, unless a start of it is pending
        self._stops.taken([k for k in keys if self.sup.instances[k].state not in
                           (im.State.STOPPING, im.State.RESTARTING)])
        for k in keys:
            if self.sup.instances[k].state is im.State.RESTARTING:
                # tenure's own stop for a restart (a health check, a ready timeout),
                # which ignores a Start too: it ends stopped, then the operator's start
                # follows it, fresh, as a start from backoff or failed is
                self.sup.feed(k, im.StopRequested())
            if self.sup.instances[k].state is im.State.STOPPING:   # after the stop
                step = self._start_when_down(k, f"{what} {k}", stop=False, timeout=timeout,
                                             continues=True)
                # the start itself: resolved in the turn that withdraws it
                deferred[k] = self.sup.pending_start(k) or step
            else:
                self.sup.feed(k, im.Start())
                waiting = self.sup.pending_start(k)   # for its `after` apps
                if waiting is not None:
                    deferred[k] = waiting
        return deferred

    async def stop(self, call: Call) -> Any:
        """Settled once each instance was down, even if a start asked after this one
        (or pending before it, backend.after_stop) took it up again at once. Apps stop
        in the reverse of their start order (:meth:`_stop_first`, :meth:`_stop_rest`),
        the levels after the first recorded in backend.db before it is asked
        (backend.stop_records: raises what that write raises, nothing asked then); a
        drain that begins before every instance was asked raises ShuttingDown naming
        the rest, which the generation that serves next stops (:meth:`resume_stops`)."""
        target, timeout = call.params["target"], call.params["timeout"]
        self._outside_window(call)
        keys = self._targets(target)
        self._require_owner(f"stop {target}")
        deadline = asyncio.get_running_loop().time() + timeout
        with self.gate.step(f"stop {target}"):
            asked = {k: self.sup.instances[k].generation for k in keys}
            started = self.sup.started_since(keys)   # by a later command: left to it
            levels = self._stop_first(keys, record=f"stop {target}")
        cut = await self._stop_rest(levels, deadline, f"stop {target}", skip=started,
                                    on_asked=self._stops.asked)
        if cut:
            raise ShuttingDown(
                "the backend is handing over to another generation: not asked to stop "
                f"{', '.join(cut)} (the apps they start after were still stopping); the "
                "generation that serves next stops them, in order, once those are down "
                "(this one if the handoff is aborted); what was asked goes on",
                {"not_stopped": cut})
        left = [k for k in started() if k not in levels[0]]   # never asked to stop
        answer = await self._settle([k for k in keys if k not in left], DOWN,
                                    _left(deadline), f"stop {target}", moved=asked)
        if left:
            answer["instances"].update((k, str(self.sup.instances[k].public_state))
                                       for k in left if k in self.sup.instances)
            answer["started_meanwhile"] = left
        return answer

    def _stop_first(self, keys: list[str], record: str | None = None) -> list[list[str]]:
        """Ask the first level of ``keys`` to stop (backend.start_order.stop_levels: the
        apps none of the others starts after); all the levels, for :meth:`_stop_rest`.
        With ``record`` (the command) the levels after the first are recorded first
        (backend.stop_records); raises what that raises, nothing asked. Call it inside
        the request's step."""
        levels = stop_levels(self.sup.instances, keys)
        if record is not None:
            self._stops.record(levels, record)
        for k in levels[0] if levels else ():
            self.sup.feed(k, im.StopRequested())   # withdraws a pending start
        return levels

    async def _stop_rest(self, levels: list[list[str]], deadline: float, what: str, *,
                         superseded: Callable[[], bool] | None = None,
                         skip: Callable[[], list[str]] | None = None,
                         on_asked: Callable[[list[str]], None] | None = None
                         ) -> list[str]:
        """Ask each level after the first to stop once the one before it is down, each
        a step; past the loop's ``deadline``, at once; never the keys ``skip`` names
        then (a start asked of them since: the latest command has them). ``on_asked``
        is told each level, in its step, once asked. Returns the keys not asked: a drain
        began (no step holds a handoff for as long as an app takes to stop), or
        ``superseded`` holds (a later command has the instances)."""
        fed = levels[0] if levels else []   # the level asked last (not those left alone)
        for i in range(1, len(levels)):
            asked = {k: self.sup.instances[k].generation for k in fed
                     if k in self.sup.instances}
            await self._wait_settled(list(asked), DOWN, _left(deadline), until_drain=True,
                                     moved=asked, superseded=superseded)
            if self.gate.paused or (superseded is not None and superseded()):
                return [k for rest in levels[i:] for k in rest]
            left_alone = set(skip() if skip is not None else ())
            fed = [k for k in levels[i] if k in self.sup.instances and k not in left_alone]
            with self.gate.step(f"{what}: stop {_apps(levels[i])}"):
                for k in fed:
                    self.sup.feed(k, im.StopRequested())
                if on_asked is not None:
                    on_asked(levels[i])
        return []

    def resume_stops(self) -> None:
        """A generation that serves (its start, or the end of an aborted handoff)
        finishes the `tenure stop`s cut before they asked every level
        (backend.stop_records), in order, in the background: each level once the one
        before is down, within STOP_TIMEOUT, never an instance a later command started
        meanwhile; a drain ends it (whoever serves next goes on from the records). One
        finisher at a time."""
        running = self._stops_finisher
        if running is not None and not running.done():
            return   # a drain and its abort, twice over
        levels, commands = self._stops.left(self.sup, self.sup.keys_of(self.gen.config))
        if not levels:
            return
        log.warning("%s was cut before it asked every app (its generation ended, or a "
                    "handoff began): stopping the %d instances it had not asked, in the "
                    "reverse of their start order", ", ".join(f"`tenure {c}`" for c in
                                                              commands),
                    sum(len(level) for level in levels[1:]))
        started = self.sup.started_since([k for level in levels for k in level])
        self._stops_finisher = spawn(self._cycles, self._stop_rest(
            levels, asyncio.get_running_loop().time() + STOP_TIMEOUT, "stops left to ask",
            skip=started, on_asked=self._stops.asked), log, "stops left to ask")

    async def restart(self, call: Call) -> Any:
        """Rolling: one instance at a time, each back to ready before the next. Stopping
        and starting one instance is one step, which a drain lets finish: no instance is
        left stopped. The roll stops at an instance that is not ready within the timeout
        (or not started again: its stop outlasts the timeout, a later stop withdrew its
        start or stopped it before the roll reached it) or that ends failed or exited:
        ``stopped_at`` names it and ``not_restarted`` lists the rest. Raises
        ShuttingDown, naming what was and was not restarted, when a drain begins before
        the last instance was started again; once it was, a drain is said in the answer
        (``handed_over``: every instance restarted, the last not seen ready here)."""
        self._outside_window(call)
        keys = self._targets(call.params["target"])
        self._refuse_stopped_stacks(keys)
        self._require_owner(f"restart {call.params['target']}")
        timeout = call.params["timeout"]
        out: dict[str, str] = {}
        settled = True
        stopped = self.sup.stopped_since(keys)   # by a later command: it is not undone
        for i, k in enumerate(keys):
            if self.gate.paused:
                raise _restart_cut(keys[:i], keys[i:], out)
            later = k in stopped() and self.sup.pending_start(k) is None   # a plain stop
            started = False if later else await self._started_again(k, timeout)
            if started is not True:
                if self.gate.paused:   # a handoff, or this generation was fenced off
                    raise _restart_cut(keys[:i], keys[i:], out)
                out.update((await self._wait_settled([k], UP, 0, until_drain=False))[1])
                return {"settled": False, "instances": out, "not_restarted": keys[i + 1:],
                        "stopped_at": k, "reasons": self._reasons([k], UP),
                        **({"withdrawn": True} if started is False else {})}
            again = self.sup.stopped_since([k])   # stops asked after its own
            ok, public = await self._wait_settled([k], UP, timeout, until_drain=True)
            out.update(public)
            if not ok and self._handing_over():
                if i + 1 == len(keys):   # all restarted: only the last one's ready is left
                    return {"settled": False, "instances": out, "handed_over": True}
                raise _restart_cut(keys[:i + 1], keys[i + 1:], out)
            settled = settled and ok
            ready = self.sup.instances[k].state is im.State.READY
            if not ok or (not ready and i + 1 < len(keys)):   # the roll stops here
                return {"settled": False, "instances": out, "not_restarted": keys[i + 1:],
                        "stopped_at": k, "reasons": self._reasons([k], (im.State.READY,)),
                        # stopped by a later command while it came up: that one has it
                        **({"withdrawn": True} if again() else {})}
        return {"settled": settled, "instances": out}

    def _handing_over(self) -> bool:
        """Whether a drain has begun (read afresh: the roll awaited since it last looked)."""
        return self.gate.paused

    async def _started_again(self, key: str, timeout: float) -> bool | None:
        """Stop ``key`` and start it again, or join a start of it already pending (a
        concurrent restart: it is restarted once). True when it was started within
        ``timeout``; False when a stop asked later withdrew the start (a later command
        has it); None when its stop outlasts ``timeout`` (it is still started once
        stopped)."""
        cycle = self._start_when_down(key, f"restart {key}", stop=True, timeout=timeout)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                return await asyncio.shield(cycle)
        return None

    def _start_when_down(self, key: str, what: str, *, stop: bool, timeout: float,
                         continues: bool = False) -> asyncio.Future[bool]:
        """Start ``key`` once it is down (after stopping it first, with ``stop``); the
        future says whether it was started. While a start of it is pending already (a
        concurrent restart or start) that one, and nothing else is done. Otherwise one
        step ``what`` that a drain lets finish, in the background: not bounded by the
        request's --timeout but by the stop policy (backend.after_stop: a start given
        up at --timeout, or fed while it is still stopping, which the instance ignores,
        would leave the app stopped), and withdrawn by any stop asked after it. The
        step begins here: ShuttingDown, nothing done, when draining, unless it
        ``continues`` the caller's running step (backend.steps)."""
        pending = self.sup.pending_start(key)
        if pending is not None:
            return pending
        with contextlib.ExitStack() as guard:
            guard.enter_context(self.gate.step(what, continues=continues))
            self._stops.taken([key])   # a stop still to ask of it is the past
            bound = after_stop_bound(self.sup.instances[key].app.stop, timeout)
            started = self.sup.start_when_down(key, bound, stop=stop)
            step = guard.pop_all()

        async def hold() -> bool:
            with step:
                return await asyncio.shield(started)
        return spawn(self._cycles, hold(), log, what)

def _left(deadline: float) -> float:
    """Seconds from now to the running loop's ``deadline``, 0 once past."""
    return max(0.0, deadline - asyncio.get_running_loop().time())


def _apps(keys: list[str]) -> str:
    """The apps of instance keys, in order: ``demo/web, demo/api``."""
    return ", ".join(dict.fromkeys(k.rsplit("/", 1)[0] for k in keys))


def _restart_cut(done: list[str], remaining: list[str], states: dict[str, str]
                 ) -> ShuttingDown:
    return ShuttingDown(
        "the backend is handing over to another generation: restarted "
        f"{', '.join(done) or 'none'}; not restarted {', '.join(remaining) or 'none'}. "
        "What was restarted comes up under the generation that serves next (this one "
        "again if the handoff is aborted; see `tenure status`); run the command again "
        "for the rest", {"restarted": done, "remaining": remaining,
                                                "instances": states})
