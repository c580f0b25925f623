"""One backend generation's life: start under a grant, adopt, serve, drain, checkpoint,
retire. The guardian drives the transitions through the ``generation.*`` methods.

Start order: read the handoff record (grant epoch, owner identity, checkpoint) → connect
to the owner pinned to that identity → require the owner's epoch to be exactly ours →
adopt (from the checkpoint, or from the owner's inventory) → open the public API →
print ``READY``. A generation that cannot prove any of these exits non-zero before it
changes anything.

Mixed in, apart for size: the adoption at start (backend.adopting), following the owner
while serving (backend.observing) and the handing-over side of a handoff
(backend.handing_over).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from protocol.aclient import AsyncClient
from protocol.errors import ConfigInvalid, IdentityMismatch, StaleEpoch
from protocol.handover import OWNER_CONTRACTS, handoff_grant, read_handoff
from protocol.identity import Identity, new_identity
from protocol.layout import Layout
from protocol.link import Link, LinkState
from protocol.server import MAX_INFLIGHT, RpcServer
from protocol.sighandler import add_signal_handler
from protocol.sockets import admin_or_viewer, ensure_private_dir, share_with_group, unshare
from protocol.stray import ignore_stray_signals
from protocol.tasks import background
from protocol.timing import Timings

from . import spool
from .adopt import Adoption
from .adopting import Adopting, handoff_int
from .certify import certificate_loop, persist, persist_loop
from .config import check_new, parse_recent, parsed_before
from .drainstate import DrainState
from .enforce import app_uids
from .events import EventLog
from .handing_over import HandingOver
from .logbudgets import LogBudgets
from .model import Config, Settings
from .observing import HEARTBEAT, Observing
from .owner_order import StopOrderTeller
from .probe_orphans import SWEEP_AFTER_S, end_orphaned_probes
from .retention import retention_loop
from .store import BackendStore, RecoveryStore
from .supervisor import Supervisor

__all__ = ["CONTRACTS", "Generation"]

log = logging.getLogger("tenure.backend")

CONTRACTS = OWNER_CONTRACTS
OWNER_MUTATIONS = MAX_INFLIGHT["admin"] - MAX_INFLIGHT["viewer"]
"""Launches and stops outstanding at the owner at once: the rest of what it handles of
one connection is left to the heartbeat, acks and queries."""
OWNER_READS = 4
"""Log pages asked of the owner at once (each answer up to 4 MiB): the heartbeat's answer
is sent after those before it, and a flood of them made it time out (the connection was
then dropped, with every launch and stop on it)."""


def empty_config() -> Config:
    return Config(stacks={}, settings=Settings(), revision="", source="")


class Generation(Adopting, Observing, HandingOver):
    def __init__(self, home: Path, activation: str) -> None:
        self.layout = Layout(home)
        self.activation = activation
        self.identity = new_identity()
        self.handoff: dict[str, Any] = {}
        self.epoch = 0
        self.owner: AsyncClient | None = None
        self.owner_identity: Identity | None = None
        self.store: BackendStore | None = None
        self.recovery: RecoveryStore | None = None
        self.sup: Supervisor | None = None
        self.config = empty_config()
        self.config_lost = False
        self.server: RpcServer | None = None
        self.cursor = 0
        self.acked = 0            # the cursor the owner was last told we processed
        self.save_failing = False     # the last persist_round could not save
        self.events_failing = False   # the last event flush failed
        self._subscribed_at = 0   # owner.losses when our subscription was made
        self.adoption = Adoption()
        self.link = Link(since=time.time(), seen=time.time())
        self.log_dropped: dict[tuple[str, str], int] | None = None  # None: owner can't say
        self.owner_uncertain: frozenset[str] = frozenset()   # launches it could not record
        self.log_write_error: dict[str, Any] | None = None   # its journal's, while failing
        self.log_budgets = LogBudgets()   # the apps' log_retention, told to the owner
        self.stop_order = StopOrderTeller()   # the owner's shutdown order, told to it
        self._repairs: set[asyncio.Future[Any]] = set()
        self.ready = False
        self.admitted = False   # changes are admitted (READY was told): admit()
        self.closing = False    # close() began
        self.spool: spool.Spool | None = None   # takes the queued config (_spool_loop)
        self._spool_wake = asyncio.Event()   # its next tick is now
        # the queued config's operation, whose end starts the deferred instances
        self._deferred_for: asyncio.Future[Any] | None = None
        self.drain_state = DrainState(time.monotonic())   # backend.drainstate
        self.checkpoint_path: str | None = None   # the last checkpoint written
        self._drain_watch: asyncio.Task[None] | None = None
        self.started_at = time.time()
        self.guardian_pid = os.getppid()   # the guardian starts every generation
        self._done = asyncio.Event()
        self.failed: str | None = None   # why a loop of ours ended this generation
        self._thawed = asyncio.Event()
        self._thawed.set()
        self._tasks: list[asyncio.Task[Any]] = []
        self._probe_sweep: asyncio.Task[None] | None = None   # backend.probe_orphans
        self.api: Any = None  # backend.api.Api, set in start()
        self.mutations = 0            # invalidations so far (a publish spans an await)
        self.certificate_writes = 0   # certificates written by this generation
        self.certified_at: float | None = None  # when a certificate last vouched
        # {error, since} while the storage refuses the certificate's writes
        self.certificate_error: dict[str, Any] | None = None
        self.metrics: Any = None      # backend.metrics_http.MetricsListener, once ready
        self.events: EventLog | None = None   # backend.events, once the store is open
        self.rpc_timings = Timings()    # requests our API served, by method
        self.owner_timings = Timings()  # our calls to the owner, by method

    # -- start ------------------------------------------------------------------------

    async def start(self) -> None:
        """Everything up to READY. Raises TenureError (nothing changed) on any doubt."""
        self.handoff = read_handoff(self.layout.handoff_file(self.activation))
        self.epoch = handoff_int(self.handoff, "epoch")
        owner = Identity.from_wire(self.handoff.get("owner"), "handoff.owner")
        ensure_private_dir(self.layout.backend, root=self.layout.home)
        self.store = BackendStore(self.layout.backend_db)
        self.recovery = RecoveryStore(self.layout.recovery_db)
        saved = self.store.config()
        self.config_lost = saved is None   # none applied yet, or backend.db set aside
        if saved is not None:
            ahead = parsed_before(saved["text"], saved["source"])
            self.config = parse_recent(saved["text"], saved["source"])
            if ahead:
                log.info("config %s: as parsed while standing by", self.config.revision[:12])
            _warn_unplannable(self.config, saved["text"])
        # every (re)connection presents the grant: the owner admits mutations only on a
        # connection bound to the current one (protocol.md, "Grants")
        self.owner = AsyncClient(self.layout.owner_sock, want=CONTRACTS,
                                 expect_instance=owner.instance, name="backend",
                                 allow_group=True, grant=handoff_grant(self.handoff))
        self.owner.timings = self.owner_timings
        # launches and stops (a stop lasts as long as the app takes to end) leave the
        # owner room for this connection's heartbeat, acks and queries
        self.owner.limit(("launch", "stop"), OWNER_MUTATIONS)
        self.owner.limit(("logs.read",), OWNER_READS)
        welcome = await self.owner.connect()
        if welcome.identity != owner:
            raise IdentityMismatch("the owner is not the process the guardian fenced",
                                   {"expected": owner.to_wire(),
                                    "actual": welcome.identity.to_wire()})
        self.owner_identity = welcome.identity
        status = await self.owner.call("status")
        self._owner_status(status)
        if status["epoch"] != self.epoch:
            raise StaleEpoch(f"owner epoch is {status['epoch']}, the grant says {self.epoch}",
                             {"current": status["epoch"]})
        # the apps' state is this generation's to write from here on (a stale one that
        # still runs finds out at its next save: backend.store.hold)
        self.store.hold(owner.instance, self.epoch, self.activation)
        # marked before any probe of ours; the sweep once the start is past
        self._probe_sweep = end_orphaned_probes(self.layout.root, self.identity,
                                                SWEEP_AFTER_S)
        self.sup = Supervisor(self.owner, self.epoch, on_mutation=self.invalidate)
        self.sup.on_fenced = self.fenced_off
        self.sup.owner_answers = lambda: self.link.state is LinkState.CONNECTED
        self.sup.save_before_stop = lambda: persist(self)
        self.sup.keep_starts_in(self.store, self.activation)
        self.sup.owner_capabilities = dict(welcome.capabilities)
        self.sup.retired = self.store.retired()
        self.events = self.sup.events = EventLog(self.store, self.activation)
        # the queued config: whether one waits decides the adoption (_adopt), and it is
        # taken once changes are admitted (_spool_loop, through the Api made below)
        self.spool = spool.Spool(self.layout.queued_config,
                                 lambda *request: self.api.apply_text(*request),
                                 self.events.record)
        await self._adopt()
        from .api import Api
        self.api = Api(self)
        self.server = RpcServer(self.layout.api_sock, self.identity, {"tenureApi": 1},
                                self.api.methods(), timings=self.rpc_timings)
        # no change is admitted until the guardian is told READY (admit): a generation
        # that hangs before it is rolled back from, and what it changed would be undone
        self.server.starting = (f"the backend generation (pid {self.identity.pid}) is "
                                "starting and not ready yet; nothing was changed")
        await self.server.start()
        self.share_api()
        await self.api.resume_operations()
        await self.sweep_at_start()
        self._tasks = [self._loop(self._read_observations(), "observation reader"),
                       self._loop(persist_loop(self), "persist"),
                       self._loop(certificate_loop(self), "certificate"),
                       self._loop(self._heartbeat_loop(), "owner heartbeat"),
                       self._loop(self._log_budget_loop(), "log budgets"),
                       self._loop(retention_loop(self), "retention"),
                       self._loop(self._spool_loop(), "queued config")]
        self.ready = True
        await self.serve_metrics()

    def admit(self) -> None:
        """Admit changes through the API: READY was told (backend.__main__.serve)."""
        self.admitted = True
        self._spool_wake.set()   # a config queued for this start is taken now
        if self.server is not None:
            self.server.starting = None

    def _loop(self, coro: Any, what: str) -> asyncio.Task[Any]:
        """One of the generation's loops. Each is part of what it promises (a status
        that follows the owner, state on disk, a certificate, bounded logs): one that
        fails ends the generation (``failed``), and the guardian recovers a new one from
        the owner's truth, rather than this one serving a view that no longer moves."""
        def failed(exc: BaseException) -> None:
            if self._done.is_set():
                return
            self.failed = f"the {what} loop failed: {type(exc).__name__}"
            log.error("%s; this generation ends, for the guardian to recover a new one",
                      self.failed)
            self._done.set()
        return background(coro, what, log, on_failure=failed)

    def share_api(self) -> None:
        """Who may use the API: the admin always; the configured viewer group read-only,
        which needs its directories searchable and the socket group-accessible."""
        assert self.server is not None
        viewers = _group(self.config.settings)
        dirs = [str(self.layout.home), str(self.layout.backend)]
        try:
            if viewers is not None:
                share_with_group(dirs, self.layout.api_sock, viewers)
            else:
                unshare(dirs, self.layout.api_sock)
        except OSError as exc:  # e.g. no longer a member of the group: serve the admin
            log.error("cannot share the API with group %s (%s); admin only", viewers, exc)
            unshare(dirs, self.layout.api_sock)
            viewers = None
        self.server.authorize = admin_or_viewer(viewers, deny=app_uids(self.config))

    # -- background loops -------------------------------------------------------------

    async def _spool_loop(self) -> None:
        """Apply what `tenure up` queued (backend.spool), while in control and admitting
        changes; the instances deferred for it are started once it is decided."""
        assert self.spool is not None
        await spool.run(self.spool, lambda: self.ready and self.admitted
                        and not self.draining and self.link.state is LinkState.CONNECTED
                        and not (self.sup is not None and self.sup.fenced),
                        self._spool_sleep, taken=self._queue_taken)

    async def _spool_sleep(self, seconds: float) -> None:
        """The spool's pause between ticks, cut short by admit()."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._spool_wake.wait()
        self._spool_wake.clear()

    def _queue_taken(self, outcome: str | None, operation: str | None) -> None:
        """The spool's outcome: the deferred instances start once the queued config
        is decided (its operation ended; rejected; nothing to change; gone), not while
        it waits for an operation already open or the owner, nor while a newer one
        waits to be taken."""
        if self.sup is None or not self.sup.deferred or outcome == "busy" or (
                self._deferred_for is not None and not self._deferred_for.done()):
            return   # (the ticks after it find nothing queued while its operation runs)
        if self._queue_waits():
            return   # the next tick takes the newer one, which decides them
        task = self.api.ops.tasks.get(operation) if operation else None
        if task is not None and not task.done():
            self._deferred_for = task
            task.add_done_callback(self._queued_operation_ended)
        else:
            self.release_deferred(f"the queued config: {outcome or 'none left'}")

    def _queued_operation_ended(self, task: asyncio.Future[Any]) -> None:
        """The queued config's operation ended (or was abandoned): what it left
        deferred starts, unless this generation is closing (its operations are cut
        short: the next generation decides them, they were never saved) or a newer
        queued config waits (it decides them)."""
        if self.closing or self._queue_waits():
            return
        self.release_deferred("the queued config's operation ended")

    def _queue_waits(self) -> bool:
        """Whether a queued config waits to be taken or decided (Spool.waits)."""
        return self.spool is not None and self.spool.waits()

    def release_deferred(self, why: str) -> None:
        """Supervisor.release_deferred with the applied config and the stopped stacks."""
        if self.sup is not None and self.api is not None and self.sup.deferred:
            self.sup.release_deferred(self.config, self.api.stopped_stacks(), why)

    async def _log_budget_loop(self) -> None:
        """The apps' log budgets told to the owner a second after the start (what an
        older generation told it may be another config's) and after a failed call
        (backend.logbudgets); apart from the heartbeat, which a large prune must not
        hold up. An operation tells them itself before its first step. The stop order
        of the owner's shutdown (backend.owner_order) is told here too."""
        while True:
            await asyncio.sleep(HEARTBEAT)
            if self.link.state is LinkState.CONNECTED:
                await self.tell_log_budgets()
                if self.owner is not None and self.sup is not None:
                    await self.stop_order.sync(self.owner, self.epoch,
                                               self.sup.owner_capabilities, self.config)

    async def tell_log_budgets(self, *, lower: bool = True) -> None:
        """Tell the owner the config's log budgets unless it knows them. Raises nothing.
        An operation calls it before it launches anything (``lower=False``): an app that
        writes fast from its first line was journalled under the default budget until
        the loop's next tick, up to a second later, and lost its oldest lines past it.
        It raises budgets only; the loop lowers them (a prune, which may take minutes,
        would hold up the operation's first step)."""
        if self.owner is not None and self.sup is not None:   # sync: only when due
            await self.log_budgets.sync(self.owner, self.epoch,
                                        self.sup.owner_capabilities, self.config,
                                        lower=lower)

    def invalidate(self, reason: str) -> None:
        """Before any change of ownership bookkeeping (an owner launch or stop, a stack
        intent, a new desired config) the certificate stops vouching. Raises what the
        store raises: the caller must then not make the change."""
        self.mutations += 1
        if self.recovery is not None:
            self.recovery.invalidate(reason)

    def status(self) -> dict[str, Any]:
        sup = self.sup
        return {"activation": self.activation, "epoch": self.epoch, "ready": self.ready,
                "draining": self.draining, "fenced": bool(sup and sup.fenced),
                "handoff": str(self.drain_state.stage),
                "identity": self.identity.to_wire(),
                "owner": self.owner_identity.to_wire() if self.owner_identity else None,
                "release": self.handoff.get("release"), "mode": self.handoff.get("mode"),
                "cursor": self.cursor, "config_revision": self.config.revision,
                "inventory": sup.inventory() if sup else [],
                "steps": self.api.running_steps() if self.api is not None else [],
                "certificate_writes": self.certificate_writes,
                "certificate_error": self.certificate_error,
                "adoption": self.adoption.to_wire(), "started_at": self.started_at}

    async def run_until_retired(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            add_signal_handler(loop, sig, self._done.set)
        ignore_stray_signals(loop, "backend")
        await self._done.wait()

    async def serve_metrics(self) -> None:
        """Serve Prometheus metrics at ``[metrics] listen`` of the current config (or
        stop serving); called at start and when a config is applied."""
        if self.metrics is None:
            if self.config.metrics.listen is None:
                return  # opt-in: without it prometheus_client is not even imported
            from .metrics import TenureCollector, fetcher
            from .metrics_http import MetricsListener
            loop = asyncio.get_running_loop()
            self.metrics = MetricsListener(TenureCollector(fetcher(self, loop)))
        await self.metrics.apply(self.config.metrics.listen)

    async def close(self) -> None:
        self.closing = True   # what its operations' ends would start is the next one's
        self._stop_watch()
        if self.metrics is not None:
            await self.metrics.close()  # first: the next generation binds the port
        tasks = [*self._tasks, *([self._probe_sweep] if self._probe_sweep else [])]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.api is not None:
            await self.api.aclose()
        if self.server is not None:
            await self.server.close()
        if self.sup is not None:
            persist(self)
            await self.sup.aclose()
        if self.owner is not None:
            await self.owner.close()
        for s in (self.store, self.recovery):
            if s is not None:
                s.close()


def _warn_unplannable(config: Config, text: str) -> None:
    """Say when the applied config (an older release applied it) fails a check this
    release makes of a new one (backend.config.check_new): it runs as applied, and the
    next apply must mend it."""
    try:
        check_new(config, text)
    except ConfigInvalid as exc:
        log.warning("the applied config %s would not be accepted as a new one by this "
                    "release (%s); it runs as applied, and the next apply must change "
                    "that", config.revision[:12], exc.msg)


def _group(settings: Settings) -> int | None:
    if not settings.viewer_group:
        return None
    import grp
    try:
        return grp.getgrnam(settings.viewer_group).gr_gid
    except KeyError:
        log.warning("viewer group %s does not exist; admin only", settings.viewer_group)
        return None
