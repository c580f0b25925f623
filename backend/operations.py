"""Operations: durable, resumable execution of a plan, one step at a time.

An operation row is written (with the new desired config, in one transaction) before
anything changes. Its ``step`` advances by compare-and-set after each step completes, and
a step that is interrupted — by a crash or a backend handoff — is simply run again by the
next generation: every step is idempotent (a restart step remembers the instance
generation it started from and does not restart twice). One operation owns a stack at a
time.

Each step runs through the drain barrier (backend.steps): a drain lets the running step
finish, and the operation waits at its next boundary until the drain is resumed or, after
a handoff, the next generation continues it from the row.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from protocol.errors import Conflict, OperationInProgress, StaleEpoch

from . import explain
from . import instance as im
from .after_stop import DOWN
from .config import parse_recent
from .model import App, Config
from .plan import rolling_out, steps_for
from .steps import StepGate
from .store import BackendStore
from .supervisor import Supervisor, instance_key, now

__all__ = ["SAID_AT_MOST", "OperationRunner", "listed"]

log = logging.getLogger("tenure.backend")

RUNNING, COMPLETE, FAILED, ABANDONED = "running", "complete", "failed", "abandoned"
NO_PROCESS = (*DOWN, im.State.BACKOFF)   # instances whose next launch is a new process
UP = (im.State.STARTING, im.State.RUNNING, im.State.READY)
STEP_TIMEOUT_SLACK = 30.0


SAID_AT_MOST = 8   # instances an error names; the rest are counted


def listed(items: list[str], sep: str = ", ") -> str:
    """``items`` joined, the first SAID_AT_MOST of them and how many more: an error of a
    step over 300 instances was one line of 13 KB."""
    more = len(items) - SAID_AT_MOST
    return sep.join(items[:SAID_AT_MOST]) + (
        f"{sep}and {more} more (`tenure status` lists them)" if more > 0 else "")


class OperationRunner:
    def __init__(self, store: BackendStore, sup: Supervisor, config: Callable[[], Config],
                 set_config: Callable[[Config], None], generation: str,
                 stopped_stacks: Callable[[], set[str]], gate: StepGate,
                 invalidate: Callable[[str], None],
                 prepare: Callable[[], Awaitable[None]] | None = None) -> None:
        """``invalidate(reason)`` makes the recovery certificate stop vouching; it runs
        before a new desired config is committed. ``prepare()`` runs before an
        operation's first step (what the owner must know before anything is launched:
        the apps' log budgets) and raises nothing."""
        self.store = store
        self.sup = sup
        self.config = config
        self.set_config = set_config
        self.generation = generation
        self.stopped_stacks = stopped_stacks
        self.gate = gate
        self.invalidate = invalidate
        self.prepare = prepare
        self.tasks: dict[str, asyncio.Task[None]] = {}
        # instance key -> the generation of its latest launch made here, which ran the
        # desired config's App (:meth:`_launching`); a launch a predecessor made is not
        # in it: it ran what that one's config said, which no record here tells
        self.launched: dict[str, int] = {}
        # operation id -> the instances its steps still to run start: instance key ->
        # whether only if never started (a scale's); kept while its task runs (_run)
        self.will_start: dict[str, dict[str, bool]] = {}
        sup.before_launch = self._launching
        sup.applied = config   # a process's end sweeps the sockets this no longer names
        sup.step_start = self.step_start   # status: why a stopped instance waits

    # -- admission --------------------------------------------------------------------

    def owner_of(self, stacks: list[str]) -> tuple[str, list[str]] | None:
        """The open operation that owns any of ``stacks``, and which of them it owns."""
        for op in self.store.operations(open_only=True):
            if held := sorted(set(op["stacks"]) & set(stacks)):
                return str(op["id"]), held
        return None

    def applying(self, revision: str) -> dict[str, Any] | None:
        """The newest open operation whose plan applies config ``revision``, None when
        none is open: an apply of that same config has nothing to add to it."""
        for op in self.store.operations(open_only=True):
            if op["plan"] and self.store.plan(op["plan"])["config_revision"] == revision:
                return op
        return None

    def admit(self, plan: dict[str, Any], request_id: str | None) -> dict[str, Any]:
        """Record the operation and commit the plan's config as desired, atomically.
        Raises OperationInProgress, Conflict (request id reused for another plan)."""
        if request_id:
            prior = self.store.operation_by_request(request_id)
            if prior is not None:
                if prior["plan"] != plan["id"]:
                    raise Conflict(f"request id {request_id} was used for another plan")
                return prior
        stacks = sorted({c["app"].split("/")[0] for c in plan["changes"]})
        holder = self.owner_of(stacks)
        if holder is not None:   # was: named the stacks asked for, not the ones it owns
            raise OperationInProgress(f"operation {holder[0]} owns {', '.join(holder[1])}",
                                      {"operation": holder[0], "stacks": holder[1]})
        op = {"id": f"op-{uuid.uuid4().hex[:12]}", "plan": plan["id"], "kind": plan["kind"],
              "stacks": stacks, "stage": RUNNING, "request_id": request_id,
              "generation": self.generation}
        new = parse_recent(plan["config_text"], plan["config_source"])
        self.invalidate("apply")
        self.store.create_operation(op, config=(plan["config_text"], plan["config_source"],
                                                new.revision))
        self._swap_config(new)
        self._event(op["id"], "admitted", plan=plan["id"], kind=plan["kind"], stacks=stacks)
        self.start(op["id"])
        return self.store.operation(op["id"])

    def _event(self, op_id: str, phase: str, **data: Any) -> None:
        if self.sup.events is not None:
            self.sup.events.record("operation", id=op_id, phase=phase, **data)

    def _swap_config(self, new: Config) -> None:
        """New desired config: instances keep their process, and a policy applies at
        once; a new definition waits for the restart step of an instance with a process
        (it follows the new policy with its old definition meanwhile), and is taken at
        once by one without (down, in backoff): its next launch runs it. (Was: an
        instance whose definition changed kept the whole old App until its step, so a
        relaunch before it ran the old command, and its policy was the old one.)
        Instances the config adds exist from now on, stopped until their step starts
        them: an operation that fails before it leaves them shown (`never started`), not
        missing."""
        self.set_config(new)
        self.launched = {k: g for k, g in self.launched.items() if k in self.sup.instances}
        for key, inst in list(self.sup.instances.items()):
            app = new.app(inst.app.stack, inst.app.name)
            if app is None:
                continue
            if inst.state not in NO_PROCESS and \
                    app.definition_digest() != inst.app.definition_digest():
                app = app.on_definition_of(inst.app)
            if app != inst.app:
                self.sup.take_app(key, app)
        for key, (app, index) in self.sup.keys_of(new).items():
            if key not in self.sup.instances:
                self.sup.ensure(app, index, False)

    def _launching(self, key: str, inst: im.Instance) -> None:
        """Instance ``key`` is about to send a launch: it runs the desired config's App
        (a start that waited for the instance to be down, a relaunch from backoff: the
        config admitted meanwhile is what the backend works towards), and what it runs
        is known here from now on (:attr:`launched`)."""
        app = self.config().app(inst.app.stack, inst.app.name)
        if app is not None and app != inst.app:
            inst.take_app(app, now())   # starting: nothing to follow it
        self.launched[key] = inst.generation

    def runs(self, key: str, app: App) -> bool:
        """Instance ``key`` has a process, launched here on ``app``'s definition."""
        inst = self.sup.instances.get(key)
        return inst is not None and inst.state in UP and \
            self.launched.get(key) == inst.generation and \
            inst.app.definition_digest() == app.definition_digest()

    def rolling(self) -> dict[str, list[int]]:
        """App key -> the instances the open operations still restart (from their
        current step on; backend.plan.rolling_out)."""
        out: dict[str, list[int]] = {}
        for op in self.store.operations(open_only=True):
            if not op["plan"]:
                continue
            plan = self.store.plan(op["plan"])
            steps = steps_for(parse_recent(plan["config_text"], plan["config_source"]),
                              plan["changes"])
            for app, indexes in rolling_out(steps[op["step"]:]).items():
                out[app] = sorted({*out.get(app, []), *indexes})
        return dict(sorted(out.items()))

    def step_start(self, key: str) -> str | None:
        """The operation running here a step of which, still to run, starts instance
        ``key``, None when none does (nor one of a stopped stack: a step leaves it
        down): status says a stopped one waits for that step, not that it was never
        started. Raises nothing."""
        inst = self.sup.instances.get(key)
        if inst is None or not self.will_start or inst.app.stack in self.stopped_stacks():
            return None
        for op_id, keys in self.will_start.items():
            new_only = keys.get(key)
            if new_only is not None and not (new_only and inst.started):
                return op_id
        return None

    def _note_starts(self, op_id: str, steps: Sequence[dict[str, Any]]) -> None:
        """Note what ``steps`` (operation ``op_id``'s still to run) start, as
        :meth:`_step` starts it: every instance of a level's apps, a scale's new ones."""
        keys: dict[str, bool] = {}
        for s in steps:
            if s["do"] == "start_apps":
                for started in filter(None, map(self._app, s["apps"])):
                    for i in range(started.instances):
                        keys[instance_key(started.stack, started.name, i)] = False
            elif s["do"] == "scale_app" and (scaled := self._app(s["app"])) is not None:
                for i in range(s["to"]):
                    keys.setdefault(instance_key(scaled.stack, scaled.name, i), True)
        self.will_start[op_id] = keys

    # -- running ----------------------------------------------------------------------

    def start(self, op_id: str) -> None:
        if op_id not in self.tasks:
            self.tasks[op_id] = task = asyncio.create_task(self._run(op_id))
            task.add_done_callback(lambda _t: self.sup.wake())   # op.show's waiters

    def resume_open(self) -> list[str]:
        """Continue every open operation (after a handoff or a crash)."""
        ids = [op["id"] for op in self.store.operations(open_only=True)]
        for op_id in ids:
            self.start(op_id)
        return ids

    async def _run(self, op_id: str) -> None:
        op = self.store.operation(op_id)
        plan = self.store.plan(op["plan"])
        steps = steps_for(parse_recent(plan["config_text"], plan["config_source"]),
                          plan["changes"])
        step, progress = op["step"], op["progress"] or {}
        try:
            self._note_starts(op_id, steps[step:])
            if self.prepare is not None:
                await self.prepare()
            while step < len(steps):
                await self.gate.wait_open()  # a step boundary: a drain holds us here
                with self.gate.step(f"operation {op_id} step {step}"):
                    progress = await self._step(op_id, steps[step], progress)
                    self.store.advance_operation(op_id, RUNNING, RUNNING, step + 1)
                step, progress = step + 1, {}
                self._note_starts(op_id, steps[step:])
            # what the config no longer names goes once its app stopped (the steps above)
            await self.sup.sweep_sockets(self.config())
            self.store.advance_operation(op_id, RUNNING, COMPLETE, step, outcome="success")
            self._event(op_id, "complete", outcome="success")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed step ends the operation, recorded
            self.will_start.pop(op_id, None)   # nothing of it starts any more
            log.error("operation %s failed at step %d: %s", op_id, step, exc)
            try:
                self.store.advance_operation(op_id, RUNNING, FAILED, step, outcome="failed",
                                             error=f"step {step}: {exc}")
                self._event(op_id, "failed", outcome="failed", error=f"step {step}: {exc}")
            except Conflict:
                pass  # abandoned meanwhile
            # the failed apply made its config the current one all the same: what it
            # no longer names is closed as well, once unused (a held socket nobody
            # serves would queue connections instead of refusing them); one an
            # instance still uses goes when its process ends (Supervisor.applied)
            await self.sup.sweep_sockets(self.config())
        finally:
            self.will_start.pop(op_id, None)
            self.tasks.pop(op_id, None)

    async def _step(self, op_id: str, s: dict[str, Any], progress: dict[str, Any]
                    ) -> dict[str, Any]:
        if s["do"] == "start_apps":
            apps = [a for a in (self._app(k) for k in s["apps"]) if a is not None]
            await self._ensure_up_many([(a, range(a.instances)) for a in apps])
            return {}
        app = self._app(s["app"])
        if s["do"] == "stop_app":
            await self._stop_keys(self._keys_of(s["app"]), forget=True)
        elif s["do"] == "scale_app":
            assert app is not None
            return await self._scale(op_id, app, s["to"], progress)
        elif s["do"] == "restart_instance":
            assert app is not None
            return await self._restart(op_id, app, s["instance"], progress)
        elif s["do"] == "update_sockets":
            assert app is not None
            await self.sup.retune_sockets(app)
        return {}

    def _app(self, key: str) -> App | None:
        stack, name = key.split("/", 1)
        return self.config().app(stack, name)

    def _keys_of(self, app_key: str) -> list[str]:
        return [k for k in self.sup.instances if k.rsplit("/", 1)[0] == app_key]

    async def _ensure_up(self, app: App, indexes: Sequence[int]) -> None:
        await self._ensure_up_many([(app, indexes)])

    async def _ensure_up_many(self, items: list[tuple[App, Sequence[int]]]) -> None:
        stopped = self.stopped_stacks()
        # the latest command wins, after a crash too: a `tenure stop` still to ask of
        # what this starts is the past (backend.stop_records)
        self._forget_stops([instance_key(app.stack, app.name, i) for app, indexes in
                            items if app.stack not in stopped for i in indexes])
        keys = [self.sup.ensure(app, i, app.stack not in stopped)
                for app, indexes in items for i in indexes]
        waiting = [k for k in keys if k.split("/")[0] not in stopped]
        if waiting:
            timeout = max(app.ready.timeout for app, _ in items) + STEP_TIMEOUT_SLACK
            await self._wait_up(waiting, timeout)

    def _forget_stops(self, keys: list[str]) -> None:
        """Forget the stops a `tenure stop` has still to ask of ``keys``
        (backend.stop_records), before this operation starts or removes them. Raises
        what the store raises; StaleEpoch fences this generation first."""
        try:
            self.store.drop_stops(keys, None)
        except StaleEpoch as exc:
            self.sup.fence(exc.msg)
            raise

    async def _stop_keys(self, keys: list[str], forget: bool) -> None:
        for k in keys:
            self.sup.feed(k, im.StopRequested())
        await self._wait(keys, lambda i: i.state in DOWN, 3600)
        if forget:
            self._forget_stops(keys)   # removed: nothing left to stop
            for k in keys:
                self.sup.forget(k)

    async def _scale(self, op_id: str, app: App, to: int, progress: dict[str, Any]
                     ) -> dict[str, Any]:
        """Remove the instances from ``to`` on; start those the scale adds (never
        started yet) and only those: one the operator stopped, or that gave up
        (``failed``), stays as it is. Which ones it adds is kept in the step's progress
        before any starts, so a resumed step waits for the same ones."""
        extra = [k for k in self._keys_of(app.key) if int(k.rsplit("/", 1)[1]) >= to]
        await self._stop_keys(extra, forget=True)
        def never_started(index: int) -> bool:
            inst = self.sup.instances.get(instance_key(app.stack, app.name, index))
            return inst is None or not inst.started
        if "added" not in progress:
            progress = {"added": [i for i in range(to) if never_started(i)]}
            self.store.set_progress(op_id, progress)
        await self._ensure_up(app, progress["added"])
        return progress

    async def _restart(self, op_id: str, app: App, index: int, progress: dict[str, Any]
                       ) -> dict[str, Any]:
        key = instance_key(app.stack, app.name, index)
        inst = self.sup.instances.get(key)
        if inst is None:
            await self._ensure_up(app, range(index, index + 1))
            return {}
        if "from_generation" not in progress:
            # an instance shown stopped (stopped by the operator, before the apply or
            # since it began, or ended and left down by its policy) takes the definition
            # and stays stopped: the stop wins, as everywhere. One whose process a launch
            # since the apply began runs on the definition already is left as it is.
            progress = {"from_generation": inst.generation,
                        "left_stopped": _shown_stopped(inst),
                        **({"current": True} if self.runs(key, app) else {})}
            self.store.set_progress(op_id, progress)  # durable before the restart begins
        stopped = app.stack in self.stopped_stacks() or progress.get("left_stopped", False)
        if progress.get("current") or (progress.get("left_stopped") and _shown_stopped(inst)):
            if inst.app != app:   # a policy since; the definition is the one it runs
                self.sup.take_app(key, app)
        elif inst.generation <= progress["from_generation"] or inst.app != app:
            await self._stop_keys([key], forget=False)
            if not stopped:   # started again: as _ensure_up_many
                self._forget_stops([key])
            self.sup.ensure(app, index, not stopped)
        if not stopped:   # a stopped stack's instance takes the definition, stays down
            await self._wait_up([key], app.ready.timeout + STEP_TIMEOUT_SLACK)
        return progress

    async def _wait_up(self, keys: list[str], timeout: float) -> None:
        """Wait until every instance became ready (since now) or gave up; one that gave
        up without ever becoming ready fails the step. Becoming ready counts even if the
        waiter only looks after it crashed again: a crash loop's outcome must not depend
        on when this coroutine ran."""
        seen = {k: self.sup.instances[k].ready_count for k in keys if k in self.sup.instances}

        def up(i: im.Instance) -> bool:
            return i.state is im.State.READY or i.ready_count > seen.get(self._key(i), 0)
        await self._wait(keys, lambda i: up(i) or i.state is im.State.FAILED, timeout,
                         must_be_up=True, came_up=up)

    @staticmethod
    def _key(i: im.Instance) -> str:
        return instance_key(i.app.stack, i.app.name, i.index)

    async def _wait(self, keys: list[str], done: Callable[[im.Instance], bool],
                    timeout: float, must_be_up: bool = False,
                    came_up: Callable[[im.Instance], bool] = lambda i: False) -> None:
        """Wait until every instance is ``done``; with ``must_be_up`` a failed one that
        never ``came_up`` fails the step, and so does one a stop asked meanwhile took
        down (`tenure stop`, `stack stop`: the latest intent wins, it stays down)."""
        stopped_since = self.sup.stopped_since(keys) if must_be_up else list

        def all_done() -> bool:
            return bool(stopped_since()) or all(done(self.sup.instances[k]) for k in keys
                                                if k in self.sup.instances)
        if not await self.sup.wait(all_done, timeout):
            raise TimeoutError(f"{listed(keys)} did not settle in {timeout:.0f} s")
        if stopped_since():
            raise RuntimeError(f"{listed(stopped_since())} stopped by a stop asked while "
                               "this step waited for it to be up; the rest of the plan is "
                               "not applied (`tenure plan` shows it)")
        failed = [k for k in keys if k in self.sup.instances
                  and self.sup.instances[k].state is im.State.FAILED
                  and not came_up(self.sup.instances[k])]
        if must_be_up and failed:
            why = [f"{k} ({explain.reason(self.sup.instances[k]) or 'failed'})"
                   for k in failed]
            raise RuntimeError(f"failed to start: {listed(why, '; ')}")

    # -- control ----------------------------------------------------------------------

    async def abandon(self, op_id: str) -> dict[str, Any]:
        """Stop running the operation and mark it abandoned (what ran stays done)."""
        op = self.store.operation(op_id)
        if op["outcome"] is not None:
            raise Conflict(f"operation {op_id} already ended: {op['outcome']}")
        task = self.tasks.pop(op_id, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        op = self.store.operation(op_id)
        self.store.advance_operation(op_id, op["stage"], ABANDONED, op["step"],
                                     outcome="abandoned")
        return self.store.operation(op_id)

    def busy(self) -> bool:
        """An operation runs or waits at a step boundary here."""
        return bool(self.tasks)

    async def aclose(self) -> None:
        tasks = list(self.tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.tasks.clear()


def _shown_stopped(inst: im.Instance) -> bool:
    """``tenure status`` shows it ``stopped``: stopped, or exited and left down."""
    return im.PUBLIC_STATE[inst.state] is im.PublicState.STOPPED
