"""The backend's API on backend/api.sock: the public methods the CLI uses and the
``generation.*`` control methods the guardian uses. One dispatch table.

Api mixes in the methods kept apart for size: status and inspect
(backend.api_status), plans and operations (backend.api_plans), start, stop and
restart (backend.api_instances), stack commands (backend.api_stacks) and logs
(backend.api_logs)."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Any

from protocol.errors import OwnerUnavailable
from protocol.procfs import running
from protocol.schema import Field, Schema, check_int, check_name
from protocol.server import Call, Method

from .api_instances import InstanceCommands
from .api_logs import VIEWER_READS, LogsReading
from .api_plans import PlanCommands
from .api_stacks import StackCommands
from .api_status import StatusReading
from .certify import publish_certificate
from .drainwatch import Caller
from .events_api import events_methods
from .jobs.api import JobApi
from .jobs.faults import JobFault
from .jobs.ledger import Ledger
from .jobs.retention import Pruner
from .jobs.runner import JobRunner
from .jobs.schedule import Scheduler
from .model import Config, plain
from .operations import OperationRunner
from .spool_api import queue_methods
from .steps import StepGate
from .targets import check_target, check_targets
from .usage import Usage

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


class Api(InstanceCommands, StackCommands, LogsReading, StatusReading, PlanCommands):
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

    # -- everyday (status and inspect: backend.api_status; plans: backend.api_plans) -----

    async def metrics(self, call: Call) -> Any:
        """What the Prometheus exposition shows (backend.metrics), and the listener."""
        from .metrics import snapshot  # prometheus_client: only when asked
        listener = self.gen.metrics.state() if self.gen.metrics is not None else None
        return {**await snapshot(self.gen), "listener": listener}

    # -- the owner's answer, which every command needs (backend.api_status: the link) -----

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
