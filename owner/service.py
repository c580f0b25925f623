"""The owner's RPC methods: one dispatch table, request shapes checked before handlers.

Every mutating method requires the current epoch (``STALE_EPOCH {current}`` otherwise,
``NO_GRANT`` before the first fence). Reads need none. The owner never decides anything
on its own: it launches, signals, stops and reports when told to.

The request shapes are in owner.service_shapes; the journal's methods (owner.service_logs)
and those of held sockets and the fd store (owner.service_sockets) are mixed in.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from protocol.errors import BadRequest, NotFound, StackFenced, StopTimeout
from protocol.framing import pack
from protocol.grant import SignedGrant
from protocol.identity import Identity
from protocol.server import Call, Method, RpcServer

from .evidence import ended_cgroups
from .grants import GrantKeeper
from .journal import Journal
from .metrics import Member, Meter, UsageMemo, launch_inodes
from .observations import RING_SIZE, ObservationRing, test_knob
from .paths import OwnerPaths
from .procinfo import Inspector
from .procs import ProcessTable
from .runas import launch_error, privileges
from .service_logs import JournalMethods
from .service_shapes import (
    S_ACK,
    S_APPS,
    S_FDSTORE,
    S_FENCE,
    S_FORGET,
    S_FORGET_APPS,
    S_INTENT,
    S_INVENTORY,
    S_KEY,
    S_LAUNCH,
    S_LOGS,
    S_METRICS,
    S_NOTE,
    S_OBS,
    S_PIN,
    S_PRUNE,
    S_RETENTION,
    S_SIGNAL,
    S_SOCKET,
    S_SOCKET_UPDATE,
    S_STOP,
    S_STOP_ORDER,
)
from .service_sockets import SocketMethods
from .specs import LaunchSpec, StopPolicy, parse_signal
from .stop import StopOutcome
from .store import Intent, LaunchRow, LaunchState, OwnerStore
from .supervise import Launcher

__all__ = ["CAPABILITIES", "OwnerService"]

log = logging.getLogger("tenure.owner")

# stackControl 2: mutations need the current grant presented on the connection (hello)
# spawnErrors 1: a LAUNCH_FAILED carries data.spawn (owner.spawnerr) and writes a tenure
# line into the app's log stream; logNotes 1: logs.note (owner.notes)
# sockets 1: launch takes ``sockets`` and ``fd_store_max``; sockets.list, sockets.close,
# fdstore.clear; FDSTORE=1 over NOTIFY_SOCKET (an older owner would ignore the launch
# keys and start the app without its sockets, so a backend checks this first)
# metrics 1: metrics.read, resource figures of every live launch (owner.metrics); with
# ``launch_keys`` only those (an owner without the parameter measures all: same answer,
# slower, so a backend needs no capability for it); ``usage_only`` likewise (an owner
# without it measures every figure)
# retention 1: launches.prune, deleting the rows of ended launches by a count
# logCounts 1: metrics.read also answers ``logs`` (lines and bytes journalled per app
# since the owner started) and ``journal_bytes`` (the journal's size on disk)
# socketInodes 1: launch.sockets, the socket inodes a launch's processes hold open
# logRetention 1: logs.retention, an app's own journal budget (owner.journalretention)
# socketUpdate 1: sockets.update, a held socket's backlog, mode and owner changed in place
# (sockets.list also says each socket's mode, user and group)
# logApps 1: logs.apps (the apps with lines kept, their bytes and newest line) and
# logs.forget_apps (every line of whole apps)
# logRetentionKeep 1: logs.retention takes ``keep``: an app not named keeps its budget
# while it has lines (without it, as before: every app not named has the default)
# stopOrder 1: stack.stop_order, the levels the shutdown stops apps in (owner.stoporder;
# without it the shutdown stops every app at once)
CAPABILITIES = {"stackControl": 2, "logJournal": 1, "logPages": 1, "logForget": 1,
                "notify": 1, "observations": 1, "fencing": 1, "spawnErrors": 1,
                "logNotes": 1, "sockets": 1, "metrics": 1, "retention": 1,
                "logCounts": 1, "socketInodes": 1, "logRetention": 1, "socketUpdate": 1,
                "logApps": 1, "logRetentionKeep": 1, "stopOrder": 1}

MEASURE_ON_LOOP = 8
"""metrics.read measures up to this many launches on the loop, more in a thread."""


class OwnerService(JournalMethods, SocketMethods):
    """Holds the owner's live state and serves it. Construct inside the running loop."""

    def __init__(self, paths: OwnerPaths, identity: Identity, store: OwnerStore,
                 journal: Journal, on_shutdown: Callable[[], None]) -> None:
        self.paths = paths
        self.identity = identity
        self.store = store
        self.journal = journal
        self.epoch = store.epoch()
        self.grant = store.grant()
        self.grants = GrantKeeper(paths.guardian_pub, identity.instance)
        self.server: RpcServer | None = None
        self.ring = ObservationRing(test_knob("TENURE_OWNER_RING_SIZE", RING_SIZE),
                                    publish=self._publish)
        self.inspector = Inspector()
        self.meter = Meter()
        self.usage_memo = UsageMemo()
        self.launcher = Launcher(store, journal, self.ring, identity.boot_id,
                                 paths.notify_address(identity.instance),
                                 home=paths.home_marker)
        self._on_shutdown = on_shutdown
        self.release: dict[str, Any] = {"running": None, "error": None}  # owner.release

    @property
    def procs(self) -> ProcessTable:
        return self.launcher.procs

    def methods(self) -> dict[str, Method]:
        return {
            "status": Method(self.status, role="viewer", while_draining=True),
            "guardian.pin": Method(self.pin, S_PIN),
            "fence": Method(self.fence, S_FENCE),
            "launch": Method(self.launch, S_LAUNCH),
            "stop": Method(self.stop, S_STOP),
            "signal": Method(self.signal, S_SIGNAL),
            "inventory": Method(self.inventory, S_INVENTORY, role="viewer",
                                while_draining=True),
            "inspect": Method(self.inspect, S_KEY, role="viewer"),
            "metrics.read": Method(self.metrics_read, S_METRICS, role="viewer",
                                   while_draining=True),
            "launch.sockets": Method(self.launch_sockets, S_KEY, role="viewer",
                                     while_draining=True),
            "sockets.list": Method(self.sockets_list, role="viewer", while_draining=True),
            "sockets.close": Method(self.sockets_close, S_SOCKET),
            "sockets.update": Method(self.sockets_update, S_SOCKET_UPDATE),
            "fdstore.clear": Method(self.fdstore_clear, S_FDSTORE),
            "stack.set_intent": Method(self.set_intent, S_INTENT),
            "stack.intents": Method(self.intents, role="viewer", while_draining=True),
            "stack.stop_order": Method(self.set_stop_order, S_STOP_ORDER),
            "logs.read": Method(self.logs_read, S_LOGS, role="viewer", while_draining=True,
                                large=True),
            "logs.dropped": Method(self.logs_dropped, role="viewer", while_draining=True),
            "logs.forget": Method(self.logs_forget, S_FORGET),
            "logs.apps": Method(self.logs_apps, S_APPS, role="viewer"),
            "logs.forget_apps": Method(self.logs_forget_apps, S_FORGET_APPS),
            "logs.retention": Method(self.logs_retention, S_RETENTION),
            "logs.note": Method(self.logs_note, S_NOTE),
            "launches.prune": Method(self.launches_prune, S_PRUNE),
            "observations.read": Method(self.obs_read, S_OBS, role="viewer",
                                        while_draining=True),
            "observations.subscribe": Method(self.obs_subscribe, S_OBS, role="viewer"),
            "observations.ack": Method(self.obs_ack, S_ACK),
            "shutdown": Method(self.shutdown),
        }

    def _publish(self, cursor: int, event: dict[str, Any]) -> None:
        if self.server is not None:
            self.server.publish("observations", cursor, event)

    def _require_epoch(self, call: Call) -> None:
        """The current grant, presented on this connection (owner.grants)."""
        self.grants.require(call, self.epoch, (self.grant or {}).get("activation"))

    # -- fencing ----------------------------------------------------------------------

    async def pin(self, call: Call) -> Any:
        """Trust-on-first-use of the guardian's key. Raises Conflict for another key."""
        return {"pinned": self.grants.pin(call.params["public_key"])}

    async def fence(self, call: Call) -> Any:
        """Verify, require a newer epoch for this instance, persist, then answer."""
        grant = self.grants.verify(call.params["grant"])
        # the whole signed grant is kept: status reports which activation holds the epoch
        signed = SignedGrant.from_wire(call.params["grant"])
        self.store.advance_epoch(self.epoch, grant.epoch, pack(signed.to_wire()))
        self.epoch = grant.epoch
        self.grant = {"epoch": grant.epoch, "activation": grant.activation}
        self.ring.emit("fenced", epoch=grant.epoch, activation=grant.activation)
        log.info("fenced to epoch %d for activation %s", grant.epoch, grant.activation)
        return {"epoch": self.epoch}

    # -- processes --------------------------------------------------------------------

    async def launch(self, call: Call) -> Any:
        self._require_epoch(call)
        p = call.params
        key = p["launch_key"]
        # a key being launched waits for that launch's answer (given once it is committed)
        first = None if self.launcher.launching(key) else \
            self.launcher.record(key) or self.store.get_launch(key)
        if first is None:
            self._require_running(p)

            def admit() -> None:   # again right before the spawn: the row took a while
                self._require_epoch(call)
                self._require_running(p)
            spec = LaunchSpec.from_wire({k: p[k] for k in ("argv", "env", "cwd", "stop",
                                                           "identity", "limits", "sockets",
                                                           "fd_store_max")
                                         if p[k] is not None})
            first = await self.launcher.launch(p, spec, self.epoch, admit)
        if first.state is LaunchState.FAILED:
            err = first.error or {}
            raise launch_error(err.get("code"))(
                err.get("msg", "launch failed"),
                {"launch_key": first.launch_key, **err, **(err.get("data") or {})})
        return first.to_wire()

    def _require_running(self, p: dict[str, Any]) -> None:
        """A stopped stack starts nothing, except for the intent revision it names."""
        intent, revision = self.store.intent(p["stack"])
        if intent is Intent.STOPPED and p["intent_revision"] != revision:
            raise StackFenced(f"stack {p['stack']!r} is stopped (intent revision "
                              f"{revision})", {"stack": p["stack"], "revision": revision})

    def _live(self, key: str) -> LaunchRow:
        row = self.launcher.record(key) or self.store.get_launch(key)
        if row is None or row.pid is None:
            raise NotFound(f"no launch {key!r} with a process", {"launch_key": key})
        return row

    async def stop(self, call: Call) -> Any:
        """Confirmed termination. Raises StopTimeout (with the result) when the group
        outlived the policy."""
        self._require_epoch(call)
        policy = StopPolicy.from_wire(call.params["policy"]) if call.params["policy"] \
            else None
        await self.launcher.answered(call.params["launch_key"])   # a launch under way
        self._require_epoch(call)   # a fence may have come meanwhile, as admit() checks
        row = self._live(call.params["launch_key"])
        result = await self.launcher.stop(row.launch_key, policy)
        wire = {"launch_key": row.launch_key, "pid": row.pid, **result.to_wire()}
        if result.outcome is StopOutcome.TIMEOUT:
            raise StopTimeout(f"{row.launch_key}: process group still alive after the "
                              "stop policy", wire)
        return wire

    async def signal(self, call: Call) -> Any:
        self._require_epoch(call)
        sig = parse_signal(call.params["signal"])
        row = self._live(call.params["launch_key"])
        assert row.pid is not None
        self.procs.signal(row.launch_key, sig, group=call.params["group"])
        return {"launch_key": row.launch_key, "pid": row.pid, "signal": sig}

    async def inventory(self, call: Call) -> Any:
        """Every launch requested before this call is in it (or has failed): a backend
        that asked for launches and then for the inventory must not find them missing
        and start them again."""
        await self.launcher.settle()
        stack = call.params["stack"]
        rows = [self._notified(r) for r in self.launcher.live.values()
                if stack is None or r.stack == stack]
        uncertain = [r.to_wire() for r in self.launcher.uncertain.values()
                     if stack is None or r.stack == stack]
        return {"owner": self.identity.to_wire(), "epoch": self.epoch, "launches": rows,
                "uncertain": uncertain, "cursor": self.ring.cursor,
                **self._held(stack)}

    def _notified(self, row: LaunchRow) -> dict[str, Any]:
        """A live launch's row with what its app told the notify socket: READY=1 sent
        (``ready_notified``) and its last ``STATUS=`` (``status_text``), when it did."""
        key, wire = row.launch_key, row.to_wire()
        if key in self.launcher.ready_notified:
            wire["ready_notified"] = True
        text = self.launcher.status_text.get(key)
        if text is not None:
            wire["status_text"] = text
        return wire

    async def inspect(self, call: Call) -> Any:
        """A launch that had a process: its row, with what its process uses now (null
        once it ended: the row then says how)."""
        row = self._live(call.params["launch_key"])
        if row.state is not LaunchState.RUNNING:
            return {**row.to_wire(), "usage": None}
        assert row.pid is not None and row.start_ticks is not None
        if len(self.inspector) > len(self.launcher.live) + 64:   # now and then: cheap
            self.inspector.keep_only({(r.pid, r.start_ticks)
                                      for r in self.launcher.live.values()})
        usage = self.inspector.inspect(row.pid, row.start_ticks)
        try:
            cgroup = self.procs.cgroup_of(row.launch_key)
        except NotFound:
            cgroup = None  # a launch this table no longer remembers
        if cgroup is not None and self.launcher.cgroups is not None:
            # Kernel figures for the whole app (every process of it), not just the leader.
            usage["cgroup"] = self.launcher.cgroups.usage(cgroup)
        return {**row.to_wire(), "usage": usage}

    async def _measure(self, rows: list[LaunchRow], usage_only: bool
                       ) -> tuple[float, list[dict[str, Any]]]:
        batch = []
        for row in rows:
            try:
                cgroup, procs = self.procs.membership(row.launch_key)
            except NotFound:
                cgroup, procs = None, ()  # not in the table: nothing to measure
            batch.append(Member(row.launch_key, cgroup, procs))
        # Off the loop: 1,000 launches are a few thousand /proc or cgroup reads, and the
        # loop drains app pipes meanwhile. A few (inspect) cost less than the thread hop.
        live = list(self.launcher.live)
        if len(batch) <= MEASURE_ON_LOOP:
            return self.meter.measure(batch, usage_only, live)
        return await asyncio.to_thread(self.meter.measure, batch, usage_only, live)

    async def metrics_read(self, call: Call) -> Any:
        """Resource figures of every live launch in one answer (owner.metrics), or of
        those of ``launch_keys`` that live; ``usage_only``: CPU and memory alone (the
        other figures None). ``at`` is CLOCK_MONOTONIC when measuring began, for rates
        between two answers."""
        wanted = call.params["launch_keys"]
        live = self.launcher.live
        rows = list(live.values()) if wanted is None else \
            [live[k] for k in dict.fromkeys(wanted) if k in live]
        usage = call.params["usage_only"]
        idents = [(r.launch_key, r.pid, r.start_ticks) for r in rows]
        client = id(call.conn)
        reused = self.usage_memo.reuse(client, idents) if usage else None
        if reused is not None:   # owner.metrics.UsageMemo: who profits, and why it is safe
            at, samples = reused
        else:
            at, samples = await self._measure(rows, usage)
            if usage:
                self.usage_memo.keep(client, at, idents, samples)
        launches = [{"launch_key": r.launch_key, "stack": r.stack, "app": r.app,
                     "instance": r.instance, "generation": r.generation, "pid": r.pid,
                     "start_ticks": r.start_ticks, "started_at": r.started_at, **s}
                    for r, s in zip(rows, samples, strict=True)]
        written = self.journal.written_by_app()
        return {"owner": self.identity.to_wire(), "epoch": self.epoch, "at": at,
                "isolation": "process-group" if self.launcher.cgroups is None
                else "cgroup", "launches": launches,
                "logs": [{"stack": st, "app": app, "lines": n, "bytes": b}
                         for (st, app), (n, b) in sorted(written.items())],
                "journal_bytes": self.journal.size_bytes()}   # two stat(2)s

    async def launch_sockets(self, call: Call) -> Any:
        """The socket inodes held open by the processes of a live launch (its cgroup, or
        its leader and tracked descendants): what a tcp readiness probe matches against
        sock_diag, for apps whose /proc/PID/fd the backend may not read. Raises NotFound
        for a launch that is not live."""
        key = call.params["launch_key"]
        self._live(key)
        cgroup, procs = self.procs.membership(key)
        inodes = await asyncio.to_thread(launch_inodes, cgroup, procs)
        return {"launch_key": key, "inodes": sorted(inodes)}

    # -- stacks -----------------------------------------------------------------------

    async def set_intent(self, call: Call) -> Any:
        self._require_epoch(call)
        p = call.params
        try:
            intent = Intent(p["intent"])
        except ValueError:
            raise BadRequest("params.intent must be running or stopped",
                             {"field": "intent"}) from None
        revision = self.store.set_intent(p["stack"], intent, p["expected_revision"])
        self.ring.emit("intent", stack=p["stack"], intent=str(intent), revision=revision)
        return {"stack": p["stack"], "intent": str(intent), "revision": revision}

    async def intents(self, call: Call) -> Any:
        return {"intents": self.store.intents()}

    async def set_stop_order(self, call: Call) -> Any:
        """The levels, first to stop first, in which the shutdown stops each stack's apps
        (owner.stoporder); the whole order, replacing the one kept."""
        self._require_epoch(call)
        order = call.params["stacks"]
        self.launcher.set_stop_order(order)
        return {"stacks": len(order)}

    # -- launch rows ------------------------------------------------------------------

    async def launches_prune(self, call: Call) -> Any:
        """Delete the rows of ended launches but the newest ``keep`` and the ``protect``
        ones (launches an open job record still needs as evidence). Rows of live or
        uncertain launches, of exited ones whose descendants linger or whose cgroup is
        still there (the evidence a reconcile needs), and of those whose output pipes are
        still open, stay."""
        self._require_epoch(call)
        protect = set(call.params["protect"]) | set(self.launcher.uncertain) | \
            set(self.procs.lingering()) | self.launcher.draining() | \
            set(ended_cgroups(self.store, self.launcher.boot_id))
        # on the loop: the store's connection belongs to it; one DELETE transaction
        return {"deleted": self.store.prune_ended(call.params["keep"], protect)}

    # -- observations -----------------------------------------------------------------

    async def obs_read(self, call: Call) -> Any:
        return self.ring.read(call.params["after"], call.params["limit"])

    async def obs_subscribe(self, call: Call) -> Any:
        """Backlog after the cursor, then every new event pushed on this connection."""
        backlog = self.ring.read(call.params["after"], call.params["limit"])
        call.conn.subscribe("observations")
        return backlog

    async def obs_ack(self, call: Call) -> Any:
        self._require_epoch(call)
        return {"acked": self.ring.ack(call.params["cursor"])}

    # -- daemon -----------------------------------------------------------------------

    async def status(self, call: Call) -> Any:
        return {"owner": self.identity.to_wire(), "epoch": self.epoch,
                "grant": self.grant, "capabilities": CAPABILITIES, "live": len(self.launcher.live),
                "exit_mode": str(self.procs.mode),
                "isolation": "process-group" if self.launcher.cgroups is None else "cgroup",
                "cursor": self.ring.cursor, "acked": self.ring.acked,
                "log_overflow_total": self.journal.overflow_total,
                "log_write_error": self.journal.health.to_wire(),
                "log_dropped": {f"{st}/{app}": n for (st, app), n
                                in sorted(self.journal.dropped_by_app().items())},
                "log_last_id": self.journal.last_id(),   # kept in memory: never waits
                "notify": dict(self.launcher.notify_stats()),
                "sockets_held": len(self.launcher.sockets.held),
                "fd_store": dict(self.launcher.fdstore.stats),
                "uncertain": sorted(self.launcher.uncertain),
                "stop_budget": self.launcher.stop_budget(),
                "release": self.release,
                "draining": bool(self.server and self.server.draining),
                **privileges(None if self.launcher.cgroups is None
                             else self.launcher.cgroups.controllers),
                "home": os.fspath(self.paths.home)}

    async def shutdown(self, call: Call) -> Any:
        """Stop every application and exit with a clean receipt (the maintenance path)."""
        self._require_epoch(call)
        asyncio.get_running_loop().call_soon(self._on_shutdown)
        return {"shutting_down": True}
