"""The backend's API on backend/api.sock: the public methods the CLI uses and the
``generation.*`` control methods the guardian uses. One dispatch table."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from protocol.errors import (
    Conflict,
    ConnectFailed,
    OutcomeUnknown,
    OwnerUnavailable,
    ShuttingDown,
    StalePlan,
    TenureError,
)
from protocol.procfs import described, read_stat, running
from protocol.schema import Field, Schema, check_int, check_name
from protocol.server import Call, Method
from protocol.window import refuse_in_window

from . import instance as im
from .activation import CAPABILITY, check_sockets, needs_sockets, retuned
from .api_instances import InstanceCommands
from .api_logs import VIEWER_READS, LogsReading
from .api_stacks import StackCommands
from .certify import publish_certificate
from .config import check_declares_something, check_new, parse_recent
from .configfile import check_size
from .drainwatch import Caller
from .enforce import Host, check_config, identity_view
from .events_api import events_methods
from .jobs.api import JobApi
from .jobs.config import job_changes
from .jobs.faults import JobFault
from .jobs.ledger import Ledger
from .jobs.retention import Pruner
from .jobs.runner import JobRunner
from .jobs.schedule import Scheduler
from .model import Config, plain
from .operations import OperationRunner
from .plan import (
    live_revision,
    new_plan,
    running_definitions,
    setting_changes,
    shown_stopped,
)
from .probes import checks_view
from .queuefile import state as queue_state
from .spool_api import queue_methods
from .steps import StepGate
from .targets import (
    check_target,
    check_targets,
    in_order,
    select_all,
)
from .usage import Usage, owner_metrics

if TYPE_CHECKING:
    from .generation import Generation

__all__ = ["Api"]

log = logging.getLogger("tenure.backend")

S_TARGET = Schema(Field("target", str, check=check_target),
                  Field("timeout", float, required=False, default=120.0,
                        check=check_int(0, 86400)),
                  # an owner maintenance window's own stop or start (api_instances)
                  Field("window", bool, required=False, default=False))
S_LOGS = Schema(Field("after", int, required=False, default=0, check=check_int(0, 2**62)),
                Field("limit", int, required=False, default=1000, check=check_int(1, 10_000)),
                Field("max_bytes", int, required=False, check=check_int(1024, 3 << 20)),
                Field("tail", int, required=False, check=check_int(0, 2**62)),
                Field("stack", str, required=False), Field("app", str, required=False),
                Field("instance", int, required=False), Field("stream", str, required=False),
                Field("targets", list, required=False, check=check_targets),
                Field("resolved", bool, required=False, default=False),
                Field("since_time", float, required=False, check=check_int(0, 2**40)))
S_STATUS = Schema(Field("targets", list, required=False, check=check_targets))
S_PLAN = Schema(Field("config_text", str), Field("source", str))
MAX_REQUEST_ID = 200


def check_request_id(v: str) -> str | None:
    """Schema check of an apply's idempotency key (kept with its operation)."""
    if not v or len(v) > MAX_REQUEST_ID or not v.isprintable():
        return f"must be 1 to {MAX_REQUEST_ID} printable characters"
    return None


S_APPLY = Schema(Field("plan", str), Field("request_id", str, required=False,
                                           check=check_request_id))
S_OP = Schema(Field("id", str))
OP_WAIT_MAX = 30   # seconds
S_OP_SHOW = Schema(Field("id", str),
                   Field("wait", float, required=False, default=0.0,
                         check=check_int(0, OP_WAIT_MAX)))
S_OPS = Schema(Field("open", bool, required=False, default=False))
S_STACK_STOP = Schema(Field("stack", str, check=check_name(64)),
                      Field("dry_run", bool, required=False, default=False),
                      Field("digest", str, required=False),
                      Field("timeout", float, required=False, default=300.0,
                            check=check_int(0, 86400)))
S_STACK = Schema(Field("stack", str, check=check_name(64)))
S_DRAIN = Schema(Field("timeout", float, required=False, default=30.0,
                       check=check_int(0, 86400)))
S_CHECKPOINT = Schema(Field("path", str))

OWNER_GONE_NEXT = ("its apps may still run, unsupervised: `tenure owner reconcile "
                   "--prepare` lists them (docs/reconcile.md)")
"""What `status` says after the owner's pid is gone."""


class Api(InstanceCommands, StackCommands, LogsReading):
    def __init__(self, gen: Generation) -> None:
        self.gen = gen
        assert gen.sup is not None and gen.store is not None
        self.sup = gen.sup
        self.store = gen.store
        self.intents: dict[str, Any] = {}              # stack -> {intent, revision}
        self._stack_locks: dict[str, asyncio.Lock] = {}   # backend.api_stacks
        self._finishing: dict[str, asyncio.Future[Any]] = {}   # backend.api_stacks
        self.gate = StepGate()
        self.ops = OperationRunner(gen.store, gen.sup, lambda: gen.config, self._set_config,
                                   gen.activation, self.stopped_stacks, self.gate,
                                   gen.invalidate,
                                   prepare=functools.partial(gen.tell_log_budgets, lower=False))
        self._procs = Usage()
        self._viewer_reads = asyncio.Semaphore(VIEWER_READS)
        self._metrics_task: asyncio.Task[None] | None = None  # the last listen change's
        self._cycles: set[asyncio.Future[Any]] = set()   # steps of _start_when_down
        self.jobs = JobRunner(Ledger(gen.store), gen.sup.owner, gen.epoch, gen.sup, self.gate,
                              config=lambda: gen.config, stopped_stacks=self.stopped_stacks,
                              fault=JobFault(guardian_sock=gen.layout.guardian_sock))
        self.jobs.on_tick += [Scheduler(self.jobs).tick, Pruner(self.jobs).tick]

    def _set_config(self, config: Config) -> None:
        old, listen = self.gen.config.settings.viewer_group, self.gen.config.metrics.listen
        self.gen.config = config
        if config.metrics.listen != listen:
            self._metrics_task = asyncio.get_running_loop().create_task(
                self._serve_metrics(self._metrics_task))
        if config.settings.viewer_group != old and self.gen.server is not None:
            self.gen.share_api()

    async def _serve_metrics(self, previous: asyncio.Task[None] | None) -> None:
        """Apply ``[metrics] listen`` once the previous change's task ended: one task at
        a time (each holding the one before it), so quick changes are applied in turn,
        the last one last, and none after the generation began to close (its close
        released the port for the next one). Raises nothing: a failure is logged."""
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)  # it logged its own
        if self.gen.closing:
            return
        try:
            await self.gen.serve_metrics()
        except Exception:
            log.exception("metrics listener: applying [metrics] listen failed")

    def methods(self) -> dict[str, Method]:
        def ctl(handler: Any, params: Schema | None = None) -> Method:
            return Method(handler, params, role="admin", while_draining=True)
        return {
            "generation.status": ctl(self.gen_status),
            "generation.drain": ctl(self.gen_drain, S_DRAIN),
            "generation.resume": ctl(self.gen_resume),
            "generation.checkpoint": ctl(self.gen_checkpoint, S_CHECKPOINT),
            "generation.retire": ctl(self.gen_retire),
            "generation.certify": ctl(self.gen_certify),
            "retention.run": Method(self.retention_run),
            "order": Method(self.order, role="viewer"),
            # read-only, and what tells an operator that a handoff holds the backend
            "status": Method(self.status, S_STATUS, role="viewer", while_draining=True),
            "start": Method(self.start, S_TARGET),
            "stop": Method(self.stop, S_TARGET),
            "restart": Method(self.restart, S_TARGET),
            "inspect": Method(self.inspect, S_TARGET, role="viewer"),
            "metrics": Method(self.metrics, role="viewer"),
            "logs": Method(self.logs, S_LOGS, role="viewer", large=True),
            "plan": Method(self.plan, S_PLAN),
            "apply": Method(self.apply, S_APPLY),
            "op.list": Method(self.op_list, S_OPS, role="viewer"),
            "op.show": Method(self.op_show, S_OP_SHOW, role="viewer"),
            "op.abandon": Method(self.op_abandon, S_OP),
            "stack.stop": Method(self.stack_stop, S_STACK_STOP),
            "stack.start": Method(self.stack_start, S_STACK),
            **JobApi(self.jobs).methods(),
            **events_methods(self.gen),
            **queue_methods(self.gen),
        }

    # -- lifecycle hooks used by Generation ---------------------------------------------

    async def resume_operations(self) -> None:
        from .jobs.resume import resume
        self.intents = (await self._owner().call("stack.intents"))["intents"]
        self.resume_stack_stops()
        self.resume_stops()   # a `tenure stop` cut before it asked every level
        self.ops.resume_open()
        await resume(self.jobs)
        self.jobs.start()

    def open_operation_ids(self) -> list[str]:
        return [op["id"] for op in self.store.operations(open_only=True)]

    def busy(self) -> bool:
        """An operation is open here or an app step runs: no certificate now. (Job starts
        and stops do not count: the certificate does not vouch for jobs, see
        protocol.digest.)"""
        return self.ops.busy() or bool(set(self.gate.running()) - self.jobs.steps())

    def running_steps(self) -> list[str]:
        return self.gate.running()

    def pause(self) -> None:
        """Drain: no step begins; requests waiting for instances to settle answer now."""
        self.gate.pause()
        self.sup.wake()

    def unpause(self) -> None:
        self.gate.unpause()
        self.resume_stack_stops()   # a drain cut a stack stop: the rest, in order
        self.resume_stops()         # and a `tenure stop`
        self.jobs.wake()

    async def wait_paused(self, timeout: float) -> bool:
        """Whether every step that had begun ended within ``timeout``."""
        return await self.gate.wait_idle(timeout)

    async def aclose(self) -> None:
        if self._metrics_task is not None:   # quick: the generation's close came first
            await asyncio.gather(self._metrics_task, return_exceptions=True)
        await self.jobs.aclose()
        await self.ops.aclose()
        for cycle in list(self._cycles):   # a restart's start after a stop still going
            cycle.cancel()
        await asyncio.gather(*self._cycles, return_exceptions=True)

    def _owner(self) -> Any:
        assert self.gen.owner is not None
        return self.gen.owner

    # -- generation control --------------------------------------------------------------

    async def gen_status(self, call: Call) -> Any:
        return self.gen.status()

    async def gen_drain(self, call: Call) -> Any:
        # who asks (the guardian): a drain whose asker is gone is ended (drainwatch)
        return await self.gen.drain(call.params["timeout"], Caller.of(call.peer.pid))

    async def gen_resume(self, call: Call) -> Any:
        return self.gen.resume()

    async def gen_checkpoint(self, call: Call) -> Any:
        return self.gen.checkpoint(call.params["path"])

    async def gen_retire(self, call: Call) -> Any:
        asyncio.get_running_loop().call_soon(self.gen.retire)
        return {"retiring": True}

    async def retention_run(self, call: Call) -> Any:
        """One retention round now (``[retention]``): what was deleted."""
        from .retention import prune_once
        missed: dict[str, str] = {}
        link = self._link()
        caps = self.sup.owner_capabilities   # an older owner can do neither
        for what, cap, doing in (("launches", "retention", "pruning its launches"),
                                 ("log_apps", "logApps", "forgetting removed apps' lines")):
            if caps.get(cap) == 1 and not link["current"]:   # not asked: it would wait
                missed[what] = str(self._unavailable(        # out its timeout
                    f"has not answered for {link['age']:.0f} s", doing, link).msg)
        deleted = await prune_once(self.gen, missed, ask_owner=link["current"])
        return {"deleted": deleted, "not_pruned": missed,
                "policy": plain(self.gen.config.retention)}

    async def order(self, call: Call) -> Any:
        """The start order of each configured stack as levels of app names (an owner
        maintenance window stops them in reverse), and the stacks stopped durably."""
        from .config import order_apps
        return {"stacks": {name: order_apps(stack)
                           for name, stack in sorted(self.gen.config.stacks.items())},
                "stopped_stacks": sorted(self.stopped_stacks())}

    async def gen_certify(self, call: Call) -> Any:
        return {"published": await publish_certificate(self.gen)}

    # -- everyday ---------------------------------------------------------------------

    async def status(self, call: Call) -> Any:
        dropped = self.gen.log_dropped
        link = self._link()
        wanted = call.params.get("targets")
        keys = in_order(self.sup.instances) if not wanted else \
            select_all(self.sup.instances, wanted)
        held, usage = await self._ask_owner(keys if wanted else None, link)
        link = self._link()    # as of the answer: the owner may have gone silent meanwhile
        t = time.monotonic()   # after the owner's answer: a launch may have ended meanwhile
        rows = [self._row(k, self.sup.instances[k], t, dropped, usage)
                for k in keys if k in self.sup.instances]   # an apply may remove some
        if not link["current"]:
            rows = [_unknown(r, link["age"]) for r in rows]
        self._procs.forget_except(self._live_idents())
        return {"backend": {"activation": self.gen.activation, "epoch": self.gen.epoch,
                            "release": self.gen.handoff.get("release"),
                            "pid": self.gen.identity.pid, "draining": self.gen.draining,
                            "config": self.gen.config.source,
                            "config_revision": self.gen.config.revision},
                "owner": self.gen.owner_identity.to_wire() if self.gen.owner_identity
                else None, "owner_link": link, "intents": self.intents, "apps": rows,
                "queued_config": queue_state(self.gen.layout.queued_config),
                "log_write_error": self.gen.log_write_error,
                "certificate_write_error": self.gen.certificate_error,
                "log_retention_unsupported": self.gen.log_budgets.unsupported,
                "jobs": self.jobs.summary(), "guardian": self._guardian_trouble(), **held}

    def _guardian_trouble(self) -> dict[str, Any] | None:
        """``{pid, gone, problem}`` when our guardian (the parent that started us) is
        stopped or gone: a crash of ours would then not be recovered, though everything
        answers. None while it runs. One small read of /proc."""
        pid = self.gen.guardian_pid
        if os.getppid() != pid:   # it died: we were handed to another parent
            return {"pid": pid, "gone": True, "problem": f"pid {pid} is gone"}
        st = read_stat(pid)
        if st is not None and not st.stopped:
            return None
        return {"pid": pid, "gone": st is None, "problem": described(pid, st)}

    async def metrics(self, call: Call) -> Any:
        """What the Prometheus exposition shows (backend.metrics), and the listener."""
        from .metrics import snapshot  # prometheus_client: only when asked
        listener = self.gen.metrics.state() if self.gen.metrics is not None else None
        return {**await snapshot(self.gen), "listener": listener}

    def _link(self, failed: bool = False) -> dict[str, Any]:
        """How current our view of the owner is (protocol.link); while it is not, or
        when a call to it has just ``failed``, also ``process``: what /proc shows of the
        owner's pid (stopped, gone, ...)."""
        link = self.gen.link.to_wire()
        ident = self.gen.owner_identity
        if (failed or not link["current"]) and ident is not None:
            st = read_stat(ident.pid)
            if st is not None and st.start_ticks != ident.start_ticks:
                st = None   # another process holds its pid now: it is gone
            link["process"] = described(ident.pid, st)
            if (st is None or st.zombie) and self._owner_died():
                link["next"] = OWNER_GONE_NEXT
        return link

    def _owner_died(self) -> bool:
        """Whether the owner that is gone ended without a clean stop (its receipt says
        so, and no reconcile proved its launches gone): its apps may run on. A clean
        stop (a service stop, an owner upgrade's window) stopped them, or hands them on."""
        from .cli.unclean import unclean_end
        ident = self.gen.owner_identity
        try:
            rec = unclean_end(self.gen.layout)
        except (TenureError, OSError):   # an unreadable receipt proves nothing either way
            return False
        return rec is not None and ident is not None and rec.get("instance") == ident.instance

    def _require_owner(self, what: str) -> None:
        """Refuse ``what`` (OwnerUnavailable, nothing done) while our view of the owner is
        not current: a start, stop or restart would wait its whole --timeout for an owner
        that does not answer (a stopped one: 150 s, then TIMEOUT), and then still be
        pending, to happen whenever it answered again; a log read failed after 11 s."""
        link = self._link()
        if not link["current"]:
            raise self._unavailable(f"has not answered for {link['age']:.0f} s", what, link)

    def _unavailable(self, why: str, what: str, link: dict[str, Any]) -> OwnerUnavailable:
        ident = self.gen.owner_identity
        then = "`tenure status` shows the owner connected"
        if ident is not None and not running(ident.pid, ident.start_ticks):
            then = ("the owner runs again: `tenure up` starts it (after `tenure owner "
                    "reconcile` if it died, docs/reconcile.md)")
        return OwnerUnavailable(
            f"the owner {why}" + (f" ({link['process']})" if link.get("process") else "")
            + f"; {what} was not done. Run it again once {then}", {"owner_link": link})

    async def _ask_owner(self, keys: list[str] | None, link: dict[str, Any]
                         ) -> tuple[dict[str, Any], dict[tuple[int, int], Any] | None]:
        """:meth:`_held` and the figures of ``keys`` (all when None; see
        :meth:`_measured`), asked of the owner at once: two calls in flight on its
        connection cost one round trip, not two. With 50 apps, a `kill -9` to its new pid
        seen through `inspect` polled every 0.5 ms went down by 0.4-0.7 ms (medians of 24
        kills, alternated in one run, 3 runs). When every figure is fresh only the held
        sockets are asked, by this task itself: two tasks and a gather cost a third of
        what the backend spends on an `inspect` (50 apps, 5,000 calls, cProfile).

        Not asked at all while ``link`` says our view is not current (the owner has not
        answered for STALE_AFTER): the rows then show what was last seen, without
        figures, at once, instead of after waiting for an owner that is silent."""
        if not link["current"]:
            return {}, {}
        launches = self._launches(keys)
        stale = self._procs.stale(launches)
        if not stale:
            return await self._held(), self._procs.recent(launches)
        held, usage = await asyncio.gather(self._held(), self._measured(launches, stale))
        return held, usage

    async def _held(self) -> dict[str, Any]:
        """The owner's held sockets and fd stores, ``{}`` when it cannot tell (it
        predates them, or it is out of reach: status still answers)."""
        if self.sup.owner_capabilities.get("sockets") != CAPABILITY["sockets"]:
            return {}
        try:
            listing = await self._owner().call("sockets.list", timeout=5.0)
        except TenureError:
            return {}
        return {"sockets": listing["sockets"], "fd_store": listing["fd_store"]}

    async def _measured(self, launches: dict[tuple[int, int], str], stale: list[str]
                        ) -> dict[tuple[int, int], Any] | None:
        """CPU% and memory by (pid, start ticks) of ``launches``, as the owner measured
        them at most FRESH_S ago (backend.usage): it is asked for the ``stale`` ones,
        those without such figures. None if it predates ``metrics`` 1 (then each row
        reads /proc); a process it could not measure (out of reach) has no figures."""
        answer = await owner_metrics(self._owner(), self.sup.owner_capabilities, stale,
                                     usage_only=True)   # a status line's CPU and memory
        if answer is None:
            return None
        self._procs.from_owner(answer)
        if len(self._procs) > 2 * len(self.sup.instances) + 64:   # inspect alone
            self._procs.forget_except(self._live_idents())       # across restarts
        return self._procs.recent(launches)

    def _launches(self, keys: list[str] | None = None) -> dict[tuple[int, int], str]:
        """(pid, start ticks) -> launch key of the instances ``keys`` (all when None)
        that run."""
        insts = self.sup.instances.values() if keys is None else \
            [self.sup.instances[k] for k in keys]
        return {(i.pid, i.start_ticks): i.launch_key for i in insts
                if i.pid is not None and i.start_ticks is not None}

    def _live_idents(self) -> set[tuple[int, int]]:
        return set(self._launches())

    def _row(self, key: str, inst: im.Instance, t: float,
             dropped: dict[tuple[str, str], int] | None,
             measured: dict[tuple[int, int], Any] | None) -> dict[str, Any]:
        usage = self._usage(inst.pid, inst.start_ticks, measured)
        return {"key": key, "stack": inst.app.stack, "app": inst.app.name,
                "instance": inst.index, "state": str(inst.public_state),
                "detail": str(inst.state), "pid": inst.pid,
                "uptime": max(0.0, round(t - inst.launched_at, 1))
                if inst.launched_at and inst.pid else None,
                "restarts": inst.restarts, "ready": inst.state is im.State.READY,
                "generation": inst.generation,
                "last_outcome": str(inst.last_outcome) if inst.last_outcome else None,
                "reason": self.sup.reason(key),
                "status_text": self.sup.status_text.get(inst.launch_key)
                if inst.pid is not None else None,
                "next_start_in": _next_start_in(inst, t),
                "log_dropped": None if dropped is None
                else dropped.get((inst.app.stack, inst.app.name), 0),
                "unrecorded": inst.launch_key in self.gen.owner_uncertain, **usage}

    def _usage(self, pid: int | None, ticks: int | None,
               measured: dict[tuple[int, int], Any] | None) -> dict[str, Any]:
        """The owner's figures (``measured``), or /proc when the owner predates them."""
        if pid is None or ticks is None:
            return {"cpu_percent": None, "rss": None}
        cpu, rss = self._procs.sample(pid, ticks) if measured is None \
            else measured.get((pid, ticks), (None, None))
        return {"cpu_percent": cpu, "rss": rss}

    async def inspect(self, call: Call) -> Any:
        keys = self._targets(call.params["target"], create=False)
        held, usage = await self._ask_owner(keys, self._link())
        link = self._link()    # as of the answer: the owner may have gone silent meanwhile
        t = time.monotonic()
        dropped = self.gen.log_dropped
        out = []
        for k in keys:
            inst = self.sup.instances.get(k)
            if inst is None:   # removed by an apply while the owner was asked
                continue
            row = self._row(k, inst, t, dropped, usage)
            if not link["current"]:
                row = _unknown(row, link["age"])
            row = {**row, "launch_key": inst.launch_key,
                   "command": list(inst.app.command), "restart": str(inst.app.restart),
                   "cwd": inst.app.cwd, "ready_kind": str(inst.app.ready.kind),
                   **checks_view(inst.app, inst.index), "stop": inst.app.stop.to_wire(),
                   "log_retention": inst.app.log_retention,
                   **identity_view(inst.app), **_activation_view(inst, held),
                   "last_error": None if inst.last_error is None
                   else inst.last_error.to_wire(),
                   "last_exit": None if inst.last_exit is None else inst.last_exit.view(),
                   "last_probe": None if inst.last_probe is None
                   else inst.last_probe.view()}
            out.append(row)
        return {"instances": out, "owner_link": link}

    def _basis(self) -> dict[str, Any]:
        """What a plan reads of the instances (backend.plan.compute_changes): the
        definitions they run, those shown stopped, those an open operation still
        restarts. One deferred for a queued config (backend.generation) runs nothing
        yet: the plan starts it, on the new definition."""
        held, instances = self.stopped_stacks(), [
            i for k, i in self.sup.instances.items() if k not in self.sup.deferred]
        return {"running": running_definitions(instances, held),
                "stopped": shown_stopped(instances), "rolling": self.ops.rolling()}

    def _live(self, basis: dict[str, Any] | None = None) -> str:
        """The live revision (backend.plan.live_revision) of now, of ``basis`` when
        given (:meth:`_basis`, taken now)."""
        return live_revision(self.gen.config, self.intents, list(self.sup.instances),
                             **(basis if basis is not None else self._basis()))

    async def plan(self, call: Call) -> Any:
        """A plan checks the config against the owner (its uid, cgroups, sockets): one
        that does not answer is named (a stopped one: with its kill -CONT), not left as
        a bare CONNECT_FAILED of the handshake; a config that does not parse is said
        first, as ever."""
        try:
            return await self.plan_text(call.params["config_text"], call.params["source"],
                                        owner_needed=True)
        except (ConnectFailed, OutcomeUnknown) as exc:
            raise self._unavailable(f"did not answer ({exc.msg})", "plan",
                                    self._link(failed=True)) from None

    async def plan_text(self, text: str, source: str, *, owner_needed: bool = False
                        ) -> dict[str, Any]:
        """Plan ``text`` against what runs; the plan is stored. Raises ConfigInvalid and
        the config checks' errors; with ``owner_needed`` (`tenure plan`), OwnerUnavailable
        when the owner does not answer, once the config parsed."""
        check_size(source, text)
        new = parse_recent(text, source)
        check_declares_something(new)
        check_new(new, text)
        if owner_needed:
            self._require_owner("plan")
        owner = self._owner()
        host = Host.of(await owner.call("status"))
        check_config(new, text, host)
        retune = await self._check_sockets(new, text, host.owner_uid)
        basis = self._basis()
        plan = new_plan(self.gen.config, new, text, source, self._live(basis),
                        retune=retune, **basis)
        self.store.add_plan(plan)
        stopped = sorted(set(plan["stacks"]) & self.stopped_stacks())   # stays down
        return {**{k: plan[k] for k in ("id", "fingerprint", "changes", "config_revision",
                                        "live_revision", "stacks")},
                "jobs": job_changes(self.gen.config, new),
                "settings": setting_changes(self.gen.config, new),
                "stopped_stacks": stopped}

    async def _check_sockets(self, new: Config, text: str, owner_uid: int
                             ) -> dict[str, list[str]] | None:
        """Plan-time socket checks (backend.activation.check_sockets); returns the held
        sockets whose settings ``new`` changes in place (backend.plan.Retune), None when
        the owner cannot change them in place."""
        if not needs_sockets(new):
            return {}
        owner = self._owner()
        caps = (await owner.connect()).capabilities
        held = (await owner.call("sockets.list"))["sockets"] \
            if caps.get("sockets") == CAPABILITY["sockets"] else []
        check_sockets(new, text, caps, held, owner_uid)
        if caps.get("socketUpdate") != CAPABILITY["socketUpdate"]:
            return None
        return retuned(new, held)

    async def apply(self, call: Call) -> Any:
        refuse_in_window(self.gen.layout.home, f"apply {call.params['plan']}")
        return self.admit(call.params["plan"], call.params["request_id"],
                          owner_needed=True)

    async def apply_text(self, text: str, source: str, request_id: str) -> dict[str, Any]:
        """Plan and apply ``text`` at once (a queued config, backend.spool); the
        operation admitted for ``request_id`` before, when there is one (a queue taken
        again after a generation died); ``planned``: the plan, when one was made."""
        if (prior := self.store.operation_by_request(request_id)) is not None:
            return prior
        plan = await self.plan_text(text, source)
        return {**self.admit(plan["id"], request_id), "planned": plan}

    def admit(self, plan_id: str, rid: str | None, *, owner_needed: bool = False
              ) -> dict[str, Any]:
        """The operation applying plan ``plan_id`` (``{"id": None, ...}`` when there is
        nothing to change); with request id ``rid``, the one admitted for it before; the
        open one already applying the plan's config, marked ``joined`` (nothing admitted).
        With ``owner_needed`` (`tenure apply`) a new operation is refused while the owner
        does not answer (OwnerUnavailable): admitted, it waited silently, then failed
        its step as 'did not settle', saying nothing of the owner; what was admitted
        before is answered all the same. Raises NotFound, Conflict, StalePlan,
        OperationInProgress, and ShuttingDown once a handoff's drain began (a queued
        config planned while it began: the checkpoint may be taken, and the next
        generation takes the queue again)."""
        if self.gate.paused:
            raise ShuttingDown(f"the backend is draining for a handoff; plan {plan_id} "
                               "was not admitted (a config `tenure up` queued is taken "
                               "again by the generation that serves next)",
                               {"plan": plan_id})
        plan = self.store.plan(plan_id)
        if rid and (prior := self.store.operation_by_request(rid)) is not None:
            if prior["plan"] != plan["id"]:
                raise Conflict(f"request id {rid} was used for plan {prior['plan']}",
                               {"request_id": rid, "plan": prior["plan"]})
            return prior
        applied = plan["config_revision"] == self.gen.config.revision
        # checked first: an operation still applying this config has made it the applied
        # one and changed what runs (so this plan, made before it, is stale), and its
        # instances may already run it (not ready, or about to fail): the answer is that
        # operation, whatever it ends with
        if applied and (open_op := self.ops.applying(plan["config_revision"])) is not None:
            return {**open_op, "joined": True}
        if plan["live_revision"] != self._live():
            raise StalePlan("the running system changed since this plan was made; plan "
                            "again", {"plan": plan["id"]})
        if applied and not plan["changes"]:
            return {"id": None, "outcome": "no-change", "changes": []}
        if owner_needed:
            self._require_owner(f"apply {plan_id}")
        return self.ops.admit(plan, rid)

    async def op_list(self, call: Call) -> Any:
        return {"operations": self.store.operations(open_only=call.params["open"])}

    async def op_show(self, call: Call) -> Any:
        """The operation's row; with ``wait`` (seconds) once it ended, or ``wait`` passed,
        or a drain began, whichever comes first (``tenure up`` and ``apply`` wait so,
        instead of asking again and again; an older backend ignores ``wait``)."""
        task = self.ops.tasks.get(call.params["id"])
        if call.params["wait"] > 0 and task is not None:
            await self.sup.wait(lambda: task.done() or self.gate.paused, call.params["wait"])
        op = self.store.operation(call.params["id"])
        plan = self.store.plan(op["plan"]) if op["plan"] else None
        return {**op, "changes": plan["changes"] if plan else [],
                "running_here": op["id"] in self.ops.tasks}

    async def op_abandon(self, call: Call) -> Any:
        return await self.ops.abandon(call.params["id"])


def _next_start_in(inst: im.Instance, t: float) -> float | None:
    """Seconds until a backing-off instance is launched again (``t``: now, monotonic);
    None in any other state."""
    due = inst.timers.get(im.Timer.BACKOFF) if inst.state is im.State.BACKOFF else None
    return None if due is None else round(max(0.0, due - t), 1)


def _activation_view(inst: im.Instance, held: dict[str, Any]) -> dict[str, Any]:
    """``sockets`` (what the owner holds for the app: address, inode, accept queue) and
    ``stored_fds`` (the instance's fd store) for inspect; null when the owner cannot
    tell."""
    if not held:
        return {"sockets": None, "stored_fds": None, "fd_store_max": inst.app.fd_store_max}
    app = inst.app
    socks = [{**{k: s[k] for k in ("name", "listen", "inode", "backlog", "queued",
                                   "queue_limit", "used_by")},
              **{k: s.get(k) for k in ("mode", "user", "group")}}   # an older owner: null
             for s in held["sockets"] if (s["stack"], s["app"]) == (app.stack, app.name)]
    stored = [f for st in held["fd_store"]
              if (st["stack"], st["app"], st["instance"]) == (app.stack, app.name, inst.index)
              for f in st["fds"]]
    return {"sockets": socks, "stored_fds": stored, "fd_store_max": app.fd_store_max}


def _unknown(row: dict[str, Any], age: float) -> dict[str, Any]:
    """A row the backend cannot vouch for now: what it last saw, and how long ago."""
    return {**row, "state": "unknown", "last_state": row["state"], "last_seen_age": age,
            "ready": None, "cpu_percent": None, "rss": None, "status_text": None}
