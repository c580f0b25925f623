"""One backend generation's life: start under a grant, adopt, serve, drain, checkpoint,
retire. The guardian drives the transitions through the ``generation.*`` methods.

Start order: read the handoff record (grant epoch, owner identity, checkpoint) → connect
to the owner pinned to that identity → require the owner's epoch to be exactly ours →
adopt (from the checkpoint, or from the owner's inventory) → open the public API →
print ``READY``. A generation that cannot prove any of these exits non-zero before it
changes anything.
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
from protocol.errors import (
    BadRequest,
    ConfigInvalid,
    IdentityMismatch,
    NotFound,
    OwnerChanged,
    StaleEpoch,
    TenureError,
)
from protocol.handover import (
    OWNER_CONTRACTS,
    handoff_grant,
    read_checkpoint,
    read_handoff,
)
from protocol.identity import Identity, new_identity
from protocol.layout import Layout
from protocol.link import STALE_AFTER, Link, LinkEvent, LinkState
from protocol.server import MAX_INFLIGHT, RpcServer
from protocol.sighandler import add_signal_handler
from protocol.sockets import admin_or_viewer, ensure_private_dir, share_with_group, unshare
from protocol.stray import ignore_stray_signals
from protocol.tasks import background
from protocol.timing import Timings

from . import spool
from .adopt import (
    Adoption,
    adopt_checkpoint,
    adopt_inventory,
    defer_backoffs,
    missed_exits,
    owner_replaced,
    record_lost_exits,
    record_unsaved_exits,
    relaunch_lost,
    resume_wanted_starts,
)
from .certify import certificate_loop, persist, persist_loop
from .config import check_new, parse_recent, parsed_before
from .configrestore import adopting_config
from .drainstate import DrainState
from .enforce import app_uids
from .events import EventLog
from .handing_over import HandingOver
from .jobs.resume import audit
from .logbudgets import LogBudgets
from .model import Config, Settings
from .owner_order import StopOrderTeller
from .retention import retention_loop
from .store import BackendStore, RecoveryStore
from .supervisor import Supervisor, now
from .tasks import spawn

__all__ = ["CONTRACTS", "Generation"]

log = logging.getLogger("tenure.backend")

CONTRACTS = OWNER_CONTRACTS
HEARTBEAT = 1.0
OWNER_MUTATIONS = MAX_INFLIGHT["admin"] - MAX_INFLIGHT["viewer"]
"""Launches and stops outstanding at the owner at once: the rest of what it handles of
one connection is left to the heartbeat, acks and queries."""
OWNER_READS = 4
"""Log pages asked of the owner at once (each answer up to 4 MiB): the heartbeat's answer
is sent after those before it, and a flood of them made it time out (the connection was
then dropped, with every launch and stop on it)."""


def empty_config() -> Config:
    return Config(stacks={}, settings=Settings(), revision="", source="")


class Generation(HandingOver):
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
        self.epoch = _int(self.handoff, "epoch")
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

    async def sweep_at_start(self) -> None:
        """Close the held sockets and fd stores the applied config no longer names: a
        predecessor may have died between stopping an app and closing them. Not while
        no config is applied (none yet, or backend.db was set aside): the empty config
        of such a generation names none, and every socket and fd store of an app not
        running went with it (a store is what an app keeps across its restarts; a
        socket, the connections queued for its next start)."""
        assert self.store is not None and self.sup is not None
        if self.store.config() is None:
            log.info("sockets: no config is applied: the held sockets and fd stores stay")
            return
        await self.sup.sweep_sockets(self.config)

    async def _adopt(self) -> None:
        assert self.owner is not None and self.sup is not None and self.store is not None
        checkpoint_path = self.handoff.get("checkpoint")
        checkpoint = read_checkpoint(checkpoint_path) if checkpoint_path else None
        losses = self.owner.losses
        backlog = await self.owner.call("observations.subscribe", {
            "after": _int(checkpoint, "cursor") if checkpoint else
            _int(self.handoff, "cursor", 0), "limit": 10_000})
        self._subscribed_at = losses
        # after the fence nothing but this generation launches, so the inventory can only
        # lose launches from here on (their exits come as observations): it serves the
        # relaunch below as well, and the intents are asked for beside it
        answers = await asyncio.gather(self.owner.call("inventory"),
                                       self.owner.call("stack.intents"))
        inv, intents = answers[0]["launches"], answers[1]["intents"]
        if self.config_lost and inv:
            self._adopt_by_given_config()
        if checkpoint is not None:
            if checkpoint.get("owner") != self.owner_identity.to_wire():  # type: ignore[union-attr]
                raise IdentityMismatch("the checkpoint names another owner")
            self.adoption = adopt_checkpoint(self.sup, self.config, checkpoint, inv, now())
        else:
            self.adoption = adopt_inventory(self.sup, self.config, self.store.instances(), inv,
                                            now())
        # before anything this generation does (or hears of) with what it adopted
        assert self.events is not None
        self.events.record("handoff", phase="adopted", activation=self.activation,
                           epoch=self.epoch, mode=self.handoff.get("mode"),
                           adopted=len(self.adoption.adopted),
                           missing=len(self.adoption.missing))
        # the exits of launches made after an instance was last saved, before the one
        # adopted (the previous generation died within a save's interval of them)
        await record_unsaved_exits(self.sup, self.adoption.unsaved, self._launch_row)
        # the launches adopted as the inventory was read: only these can be lost (the
        # replay below may launch an instance again, after the inventory was read)
        known = {k: i.launch_key for k, i in self.sup.instances.items()}
        self._apply_observations(backlog)
        stopped = {s for s, v in intents.items() if v.get("intent") == "stopped"}
        live = {r["launch_key"] for r in inv}
        await record_lost_exits(self.sup, live, self._launch_row, known)
        # a config queued before this generation began (`tenure up --config` on a home
        # whose daemons were down) decides what starts: the applied one's instances
        # wait for it (_spool_loop), rather than start and be replaced at once. Not in
        # a hot handoff (a checkpoint): the incumbent ran them and would go on so (a
        # backoff stopped here lost its deadline and streak; a config it had taken may
        # wait long, for an operation that holds its stacks)
        defer = checkpoint is None and self._queue_waits()
        lost = relaunch_lost(self.sup, live, stopped, known, defer=defer)
        for key, (app, index) in self.sup.keys_of(self.config).items():
            if key not in self.sup.instances:  # restored instances keep their own state
                up = app.stack not in stopped
                self.sup.ensure(app, index, None if defer and up else up)
        if defer:
            defer_backoffs(self.sup, stopped)
        if lost:
            self._log_lost(lost, "starting them again" if not self.sup.deferred else
                           "they start once the config queued for the backend is decided")
        resume_wanted_starts(self.sup, self.store, stopped)

    def _adopt_by_given_config(self) -> None:
        """Apps run and backend.db holds no applied config (set aside): the config given
        to `tenure backend recover --config` is the one to adopt them by, kept as the
        applied one (backend.configrestore). Raises Uncertain, ConfigInvalid."""
        assert self.store is not None and self.recovery is not None
        self.config, text = adopting_config(self.recovery.read()["body"],
                                            self.layout.queued_config)
        with self.store.tx() as db:
            self.store.set_config(db, text, self.config.source, self.config.revision)
        log.warning("backend.db held no applied config while apps run: adopting them by "
                    "%s (revision %s), as given", self.config.source,
                    self.config.revision[:12])

    def _log_lost(self, lost: list[str], then: str) -> None:
        """Say why instances are started again: the owner they ran under stopped (the
        last certificate names another owner instance: `tenure down`, an owner restart,
        a reboot; it stopped them itself, or they ended with the machine), or they ended
        while no backend watched (a crash, a kill: worth a warning)."""
        assert self.recovery is not None and self.owner_identity is not None
        if owner_replaced(self.recovery.read()["body"], self.owner_identity.instance):
            log.info("%d instances ran under the owner that stopped before this one "
                     "(tenure down, an owner restart or a reboot); %s: %s",
                     len(lost), then, lost[:10])
        else:
            log.warning("%d instances lost their process while no backend watched; "
                        "%s: %s", len(lost), then, lost[:10])

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

    def _apply_observations(self, batch: dict[str, Any]) -> None:
        assert self.sup is not None
        self.link.handle(LinkEvent.SEEN, time.time())
        for e in batch["events"]:
            self._observe(e)
        self.cursor = max(self.cursor, batch["cursor"])
        if batch.get("gap"):
            log.warning("observation gap after cursor %s: repairing from the inventory",
                        self.cursor)
            spawn(self._repairs, self._repair_gap(), log, "observation gap repair")

    async def _repair_gap(self) -> None:
        """Events were lost: every instance whose launch the owner no longer runs gets
        the exit it would have heard, exactly as if the event had come (restart policy,
        readiness and operations follow from it); every running job record whose launch
        ended is settled from the owner's record at once."""
        assert self.owner is not None and self.sup is not None
        try:
            live = {r["launch_key"] for r in
                    (await self.owner.call("inventory"))["launches"]}
            for missed in missed_exits(self.sup, live):
                ended = await self._ended(missed)
                self.sup.on_observation({"kind": "exit", "launch_key": missed, **ended})
            if self.api is not None:   # jobs: their records settle from the owner's rows
                await audit(self.api.jobs, "was lost in an observation gap")
        except TenureError as exc:   # the next gap or reconnect repairs again
            log.error("could not repair the observation gap: %s", exc)

    async def _ended(self, launch_key: str) -> dict[str, Any]:
        """How a launch ended, from the owner's record (unknown: neither code nor signal),
        and when (``at``, as an observation says it: the exit event is told then)."""
        row = (await self._launch_row(launch_key)) or {}
        ex = row.get("exit") or {}
        return {"exit_code": ex.get("exit_code"), "signal": ex.get("signal"),
                "at": row.get("ended_at")}

    async def _launch_row(self, launch_key: str) -> dict[str, Any] | None:
        """The owner's record of a launch that had a process; None when it has none."""
        assert self.owner is not None
        try:
            return dict(await self.owner.call("inspect", {"launch_key": launch_key}))
        except NotFound:
            return None

    def _observe(self, e: dict[str, Any]) -> None:
        assert self.sup is not None
        self.sup.on_observation(e)
        if self.api is not None:
            self.api.jobs.on_observation(e)

    # -- background loops -------------------------------------------------------------

    async def _read_observations(self) -> None:
        assert self.owner is not None and self.sup is not None
        while True:
            await self._thawed.wait()
            ev = await self.owner.next_event(1.0)
            if self.owner.losses != self._subscribed_at:
                # the connection our subscription lived on is gone, even if another
                # call has connected again since: nothing is pushed until we subscribe
                self.link.handle(LinkEvent.BROKE, time.time(), "the connection broke")
                await self._reconnect_owner()
                continue
            if ev is None or ev.stream != "observations" or ev.cursor <= self.cursor:
                continue
            self.link.handle(LinkEvent.SEEN, time.time())
            # Frozen meanwhile: hold the event until resumed. Dropping it was safe only
            # for a handoff that completes (the next generation reads after the
            # checkpoint's cursor); after an aborted drain nobody would read it again.
            await self._thawed.wait()
            self._observe({**ev.e, "cursor": ev.cursor})
            self.cursor = max(self.cursor, ev.cursor)

    async def _reconnect_owner(self) -> None:
        """The owner connection broke: resubscribe after our cursor (same instance only:
        the client refuses another owner with OWNER_CHANGED)."""
        assert self.owner is not None
        losses = self.owner.losses
        try:
            batch = await self.owner.call("observations.subscribe",
                                          {"after": self.cursor, "limit": 10_000})
            self._subscribed_at = losses   # lost meanwhile: the reader subscribes again
            self._apply_observations(batch)
        except OwnerChanged as exc:
            self.link.handle(LinkEvent.CHANGED, time.time(), exc.msg)
            log.error("another owner instance answers: %s", exc)
            await asyncio.sleep(1.0)
        except TenureError as exc:
            self.link.handle(LinkEvent.FAILED, time.time(), exc.msg)
            log.error("owner unreachable: %s", exc)
            await asyncio.sleep(1.0)

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

    async def _heartbeat_loop(self) -> None:
        """The owner's status once a second: the age of our view says how current it is
        even when nothing happens, and ``log_dropped`` (lines the owner's journal dropped
        per app: its queue was full, or a write failed) and ``log_write_error`` (while its
        writes fail) are kept for status and inspect without a call of their own."""
        assert self.owner is not None
        while True:
            await asyncio.sleep(HEARTBEAT)
            if self.link.state is not LinkState.CONNECTED:
                continue
            try:
                # until the view would go stale anyway (it was seen a heartbeat ago): a
                # timed-out call drops the connection and every call on it (each then
                # tried again), and an owner busy stopping thousands of apps could
                # answer in 3 s, not in 2
                self._owner_status(await self.owner.call(
                    "status", timeout=STALE_AFTER - HEARTBEAT))
                self.link.handle(LinkEvent.SEEN, time.time())
            except OwnerChanged as exc:
                self.link.handle(LinkEvent.CHANGED, time.time(), exc.msg)
            except TenureError as exc:
                self.link.exchange_failed(time.time(), exc.msg)

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

    def _owner_status(self, status: dict[str, Any]) -> None:
        """Keep what the owner's status says. A newer epoch fences this generation,
        unless a handoff holds it: then the guardian fenced for its candidate and
        retires it next (backend.drainwatch ends a handoff the guardian left)."""
        epoch = status.get("epoch")
        if self.sup is not None and isinstance(epoch, int) and epoch > self.epoch and \
                not self.drain_state.held:
            self.sup.fence(f"the owner holds epoch {epoch}, this generation {self.epoch}")
        dropped = status.get("log_dropped")
        self.log_dropped = None if not isinstance(dropped, dict) else {
            (k.partition("/")[0], k.partition("/")[2]): n for k, n in dropped.items()}
        failing = status.get("log_write_error")
        self.log_write_error = failing if isinstance(failing, dict) else None
        uncertain = status.get("uncertain")
        self.owner_uncertain = frozenset(k for k in uncertain if isinstance(k, str)) \
            if isinstance(uncertain, list) else frozenset()

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
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
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


def _int(d: dict[str, Any] | None, key: str, default: int | None = None) -> int:
    v = (d or {}).get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"handoff record field {key} must be an integer")
    return v


def _group(settings: Settings) -> int | None:
    if not settings.viewer_group:
        return None
    import grp
    try:
        return grp.getgrnam(settings.viewer_group).gr_gid
    except KeyError:
        log.warning("viewer group %s does not exist; admin only", settings.viewer_group)
        return None
