"""The owner's RPC methods: one dispatch table, request shapes checked before handlers.

Every mutating method requires the current epoch (``STALE_EPOCH {current}`` otherwise,
``NO_GRANT`` before the first fence). Reads need none. The owner never decides anything
on its own: it launches, signals, stops and reports when told to.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from protocol.errors import (
    BadRequest,
    Conflict,
    NotFound,
    StackFenced,
    StopTimeout,
)
from protocol.framing import pack
from protocol.grant import SignedGrant
from protocol.identity import Identity
from protocol.schema import Field, Schema, check_int, check_key, check_name, check_str_map
from protocol.server import Call, Method, RpcServer

from . import stoporder
from .evidence import ended_cgroups
from .grants import GrantKeeper
from .journal import Journal, LogSource
from .journalforget import APPS_PAGE, MAX_APPS, MAX_SOURCES
from .journalretention import MAX_RETENTION, MIN_RETENTION
from .metrics import Member, Meter, UsageMemo, launch_inodes
from .notes import MAX_NOTE, write_note
from .observations import RING_SIZE, ObservationRing, test_knob
from .paths import OwnerPaths
from .procinfo import Inspector
from .procs import ProcessTable
from .runas import launch_error, privileges
from .sockets import MAX_SOCKETS, SocketDecl, socket_key
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

MAX_BUDGETS = 10_000   # apps named in one logs.retention call

MEASURE_ON_LOOP = 8
"""metrics.read measures up to this many launches on the loop, more in a thread."""

LOGS_PAGE_BYTES = 1 << 20
"""Default byte budget of one logs.read answer; at most LOGS_PAGE_BYTES_MAX, which with
one 16 KiB line over it stays well inside the 4 MiB frame."""
LOGS_PAGE_BYTES_MAX = 3 << 20

JOURNAL_THREADS = 2
"""Threads that read the journal for requests, for every connection together: their own,
not asyncio's shared default pool, where 150 pipelined logs.read of one client (each
waiting for the journal's one reader) held every thread and the owner's other work off
the loop waited seconds behind them. The rest wait their turn in this pool."""
_journal_pool = ThreadPoolExecutor(JOURNAL_THREADS, thread_name_prefix="journal-rpc")
_maintenance_pool = ThreadPoolExecutor(1, thread_name_prefix="journal-maint")
"""The one thread of the journal's maintenance requests (logs.retention, logs.forget,
logs.forget_apps), which take the writer for as long as their deletes run: in the
request threads, two of them held both, and every logs.read waited until they ended."""
_T = TypeVar("_T")


async def on_journal_thread(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)`` in the journal's own threads."""
    return await _in(_journal_pool, functools.partial(fn, *args, **kwargs))


async def on_maintenance_thread(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)`` in the journal's maintenance thread, one after another."""
    return await _in(_maintenance_pool, functools.partial(fn, *args, **kwargs))


async def _in(pool: ThreadPoolExecutor, call: Callable[[], _T]) -> _T:
    return await asyncio.get_running_loop().run_in_executor(pool, call)

_name = check_name(128)
_uint = check_int(0, 2**62)
S_PIN = Schema(Field("public_key", str))
S_FENCE = Schema(Field("grant", dict))
S_LAUNCH = Schema(
    Field("launch_key", str, check=check_key(200)),
    Field("stack", str, check=_name), Field("app", str, check=_name),
    Field("instance", int, check=_uint), Field("generation", int, check=_uint),
    Field("argv", list), Field("env", dict, required=False, default={}, check=check_str_map),
    Field("cwd", str, required=False), Field("stop", dict, required=False, default={}),
    Field("intent_revision", int, required=False, check=_uint),
    Field("identity", dict, required=False), Field("limits", dict, required=False),
    Field("sockets", list, required=False), Field("fd_store_max", int, required=False),
)
S_KEY = Schema(Field("launch_key", str, check=check_key(200)))
S_STOP = Schema(Field("launch_key", str, check=check_key(200)),
                Field("policy", dict, required=False))
S_SIGNAL = Schema(Field("launch_key", str, check=check_key(200)),
                  Field("signal", (str, int)), Field("group", bool, required=False, default=True))
S_INTENT = Schema(Field("stack", str, check=_name), Field("intent", str),
                  Field("expected_revision", int, check=_uint))
S_STOP_ORDER = Schema(Field("stacks", dict, check=stoporder.check_order))
S_LOGS = Schema(Field("after", int, required=False, default=0, check=_uint),
                Field("limit", int, required=False, default=1000, check=check_int(1, 10_000)),
                Field("max_bytes", int, required=False, default=LOGS_PAGE_BYTES,
                      check=check_int(1024, LOGS_PAGE_BYTES_MAX)),
                Field("tail", int, required=False, check=_uint),
                Field("stack", str, required=False, check=_name),
                Field("app", str, required=False, check=_name),
                Field("instance", int, required=False, check=_uint),
                Field("stream", str, required=False))


def _note_text(v: Any) -> str | None:
    if not v or len(v) > MAX_NOTE or "\0" in v:
        return f"must be 1 to {MAX_NOTE} characters without NUL"
    return None


def _per_app(what: str, third: str | None, v: Any, check: Callable[[Any], bool] = bool,
             rule: str = "") -> str | None:
    """A list of ``{stack, app, <third>}`` (``{stack, app}`` without ``third``) with
    names and ``check(<third>)``: None, or what is wrong with the first item that is
    not."""
    keys = ("stack", "app") if third is None else ("stack", "app", third)
    for item in v:
        if not isinstance(item, dict) or set(item) != set(keys):
            return f"each {what} must be {{{', '.join(keys)}}}"
        for key in ("stack", "app"):
            if not isinstance(item[key], str) or _name(item[key]) is not None:
                return f"each {what}'s {key} must be a name (1-128 printable, no '/')"
        if third is None:
            continue
        n = item[third]
        if isinstance(n, bool) or not isinstance(n, int) or not check(n):
            return f"each {what}'s {third} must be {rule}"
    return None


def _sources(v: Any) -> str | None:
    if not 1 <= len(v) <= MAX_SOURCES:
        return f"must list 1 to {MAX_SOURCES} sources"
    return _per_app("source", "instance", v, lambda n: _uint(n) is None,
                    "an integer >= 0")


def _budgets(v: Any) -> str | None:
    if len(v) > MAX_BUDGETS:
        return f"must name at most {MAX_BUDGETS} apps"
    return _per_app("budget", "bytes", v, lambda n: MIN_RETENTION <= n <= MAX_RETENTION,
                    f"{MIN_RETENTION} to {MAX_RETENTION}")


def _apps(v: Any) -> str | None:
    if not 1 <= len(v) <= MAX_APPS:
        return f"must name 1 to {MAX_APPS} apps"
    return _per_app("app", None, v)


S_FORGET = Schema(Field("sources", list, check=_sources))
S_FORGET_APPS = Schema(Field("apps", list, check=_apps))
S_APPS = Schema(Field("after_stack", str, required=False, check=_name),
                Field("after_app", str, required=False, check=_name),
                Field("limit", int, required=False, default=APPS_PAGE,
                      check=lambda v: None if 1 <= v <= APPS_PAGE
                      else f"must be 1 to {APPS_PAGE}"))
S_RETENTION = Schema(Field("budgets", list, check=_budgets),
                     Field("keep", bool, required=False, default=False))
S_PRUNE = Schema(Field("keep", int, check=check_int(100, 10_000_000)),
                 Field("protect", list, required=False, default=[],
                       check=lambda v: None if len(v) <= 100_000 and all(
                           isinstance(k, str) for k in v) else "a list of launch keys"))
S_NOTE = Schema(Field("stack", str, check=_name), Field("app", str, check=_name),
                Field("instance", int, check=_uint), Field("generation", int, check=_uint),
                Field("text", str, check=_note_text))
S_OBS = Schema(Field("after", int, required=False, default=0, check=_uint),
               Field("limit", int, required=False, default=1000, check=check_int(1, 10_000)))
S_ACK = Schema(Field("cursor", int, check=_uint))
S_INVENTORY = Schema(Field("stack", str, required=False, check=_name))
S_METRICS = Schema(Field("launch_keys", list, required=False,
                         check=lambda v: None if all(isinstance(k, str) for k in v)
                         else "must be a list of launch keys"),
                   Field("usage_only", bool, required=False, default=False))
SOCKET_KEY_MAX = 700
"""Characters of the longest socket key a launch can make (owner.sockets.socket_key:
stack and app of 128, a name of 255, an address): sockets.close takes every one."""


def _socket_key(v: str) -> str | None:
    if not 1 <= len(v) <= SOCKET_KEY_MAX or not v.isprintable():
        return f"must be 1 to {SOCKET_KEY_MAX} printable characters (a key sockets names)"
    return None


S_SOCKET = Schema(Field("key", str, check=_socket_key))
S_SOCKET_UPDATE = Schema(Field("stack", str, check=_name), Field("app", str, check=_name),
                         Field("sockets", list, check=lambda v: None if 1 <= len(v) <=
                               MAX_SOCKETS else f"must list 1 to {MAX_SOCKETS} sockets"))
S_FDSTORE = Schema(Field("stack", str, check=_name), Field("app", str, check=_name),
                   Field("instance", int, required=False, check=_uint))


class OwnerService:
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

    # -- sockets and the fd store ------------------------------------------------------

    def _held(self, stack: str | None = None) -> dict[str, Any]:
        users = self.launcher.sockets_in_use()
        socks = [{**w, "used_by": sorted(users.get(w["key"], []))}
                 for w in self.launcher.sockets.to_wire()
                 if stack is None or w["stack"] == stack]
        store = [s for s in self.launcher.fdstore.to_wire()
                 if stack is None or s["stack"] == stack]
        return {"sockets": socks, "fd_store": store}

    async def sockets_list(self, call: Call) -> Any:
        """Held sockets (address, inode, accept queue, launches using them) and stored
        fds per app instance."""
        return {**self._held(), "fd_store_stats": dict(self.launcher.fdstore.stats)}

    async def sockets_close(self, call: Call) -> Any:
        """Close the socket held under ``key``; idempotent. Raises Conflict, closing
        nothing, while a live launch was given it."""
        self._require_epoch(call)
        key = call.params["key"]
        users = sorted(self.launcher.sockets_in_use().get(key, []))
        if users:
            raise Conflict(f"socket {key} is in use by {', '.join(users[:5])}",
                           {"key": key, "launch_keys": users[:100]})
        closed = self.launcher.sockets.close(key)
        if closed:
            self.ring.emit("socket_closed", key=key)
        return {"key": key, "closed": closed}

    async def sockets_update(self, call: Call) -> Any:
        """Give the sockets held for ``stack/app`` the backlog, mode and owner of
        ``sockets`` (each as a launch names it) now, each staying the same socket; one
        not held is left to the launch that creates it, one that has them already is
        not touched (``updated`` names those changed). All are parsed before any is
        changed. Raises BadRequest (a bad socket) and SocketUnavailable (naming the one
        that could not take its settings; those before it took theirs)."""
        self._require_epoch(call)
        p = call.params
        decls = [SocketDecl.from_wire(d) for d in p["sockets"]]
        updated, not_held = [], []
        for decl in decls:
            key = socket_key(p["stack"], p["app"], decl)
            if key not in self.launcher.sockets.held:
                not_held.append(key)
            elif self.launcher.sockets.update(p["stack"], p["app"], decl):
                updated.append(key)
                self.ring.emit("socket_updated", key=key)
        return {"updated": updated, "not_held": not_held}

    async def fdstore_clear(self, call: Call) -> Any:
        """Close the stored fds of ``stack/app`` (one instance, or all); idempotent."""
        self._require_epoch(call)
        p = call.params
        store = self.launcher.fdstore
        keys = [k for k in store.stored_keys() if k[:2] == (p["stack"], p["app"])
                and (p["instance"] is None or k[2] == p["instance"])]
        return {"cleared": sum(store.clear(k) for k in keys)}

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

    # -- logs and observations ---------------------------------------------------------

    async def logs_read(self, call: Call) -> Any:
        """One page: at most ``limit`` records and ``max_bytes`` of answer; ``next`` is
        the ``after`` of the next page and ``more`` says whether one may follow now."""
        p = call.params
        if p["stream"] not in (None, "stdout", "stderr"):
            raise BadRequest("params.stream must be stdout or stderr", {"field": "stream"})
        page = await on_journal_thread(
            self.journal.read_page, p["after"], p["limit"], max_bytes=p["max_bytes"],
            tail=p["tail"], stack=p["stack"], app=p["app"], instance=p["instance"],
            stream=p["stream"])
        return page.to_wire()

    async def logs_dropped(self, call: Call) -> Any:
        """Lines dropped per app since the owner started (the journal queue was full)."""
        dropped = self.journal.dropped_by_app()
        return {"apps": [{"stack": st, "app": app, "dropped": n}
                         for (st, app), n in sorted(dropped.items())],
                "total": self.journal.overflow_total}

    async def logs_forget(self, call: Call) -> Any:
        """Delete every journal line of each named ``{stack, app, instance}`` (all its
        generations) in one transaction; idempotent. Raises Conflict, deleting nothing,
        when a source still has a process (its lines are still being written)."""
        self._require_epoch(call)
        sources = sorted({(s["stack"], s["app"], s["instance"])
                          for s in call.params["sources"]})
        named = set(sources)
        self._refuse_busy("of these sources still have a process",
                          lambda r: (r.stack, r.app, r.instance) in named)
        deleted = await on_maintenance_thread(self.journal.forget, sources)
        return {"sources": len(sources), "deleted": deleted}

    async def logs_apps(self, call: Call) -> Any:
        """Each app with lines in the journal, its bytes and the time of its newest line
        (the backend forgets those of apps its config no longer has: logs.forget_apps),
        in (stack, app) order after ``after_stack``/``after_app``, at most ``limit``;
        ``more`` says whether a page follows."""
        p = call.params
        if (p["after_stack"] is None) != (p["after_app"] is None):
            raise BadRequest("params.after_stack and params.after_app go together",
                             {"field": "after_app"})
        after = None if p["after_stack"] is None else (p["after_stack"], p["after_app"])
        kept = await on_journal_thread(self.journal.apps, after, p["limit"] + 1)
        return {"apps": [{"stack": st, "app": app, "bytes": n, "last_at": at}
                         for st, app, n, at in kept[:p["limit"]]],
                "more": len(kept) > p["limit"]}

    async def logs_forget_apps(self, call: Call) -> Any:
        """Delete every journal line of each named ``{stack, app}`` (all its instances
        and generations), one transaction per app; idempotent. Raises Conflict, deleting
        nothing, while one of them still has a process."""
        self._require_epoch(call)
        apps = sorted({(a["stack"], a["app"]) for a in call.params["apps"]})
        named = set(apps)
        self._refuse_busy("processes of these apps still run",
                          lambda r: (r.stack, r.app) in named)
        deleted = await on_maintenance_thread(self.journal.forget_apps, apps)
        return {"apps": len(apps), "deleted": deleted}

    def _refuse_busy(self, what: str, matches: Callable[[LaunchRow], bool]) -> None:
        """Raises Conflict naming the live or uncertain launches that ``matches``: lines
        of theirs are still being written, so none may be forgotten."""
        rows = [*self.launcher.live.values(), *self.launcher.uncertain.values()]
        busy = sorted({r.launch_key for r in rows if matches(r)})
        if busy:
            raise Conflict(f"{len(busy)} {what}: {', '.join(busy[:5])}",
                           {"launch_keys": busy[:100]})

    async def logs_retention(self, call: Call) -> Any:
        """Give the named apps their own journal budget (the bytes of output kept, the
        oldest pruned; one named with the default has none of its own); an app not named
        has the default, or with ``keep`` keeps the budget stored for it while it has
        lines (one taken out of the config; owner.journal.Journal.set_retention). Stored
        durably; a smaller budget prunes at once. Idempotent. Answers the budgets now in
        force."""
        self._require_epoch(call)
        budgets = {(b["stack"], b["app"]): b["bytes"] for b in call.params["budgets"]}

        def apply() -> tuple[int, dict[tuple[str, str], int]]:
            self.journal.set_retention(budgets, call.params["keep"])
            return self.journal.retention()
        default, now = await on_maintenance_thread(apply)
        return {"default": default, "budgets": [{"stack": st, "app": app, "bytes": n}
                                                for (st, app), n in sorted(now.items())]}

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

    async def logs_note(self, call: Call) -> Any:
        """Write one tenure line (owner.notes) into an app's log stream: the backend's
        word on why it gave up on the app. ``written`` is false when the journal queue
        had no room (the line is counted as dropped, like any other)."""
        self._require_epoch(call)
        p = call.params
        source = LogSource(p["stack"], p["app"], p["instance"], p["generation"])
        return {"written": write_note(self.journal, source, p["text"])}

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


def source_of(row: LaunchRow) -> LogSource:
    return LogSource(row.stack, row.app, row.instance, row.generation)
