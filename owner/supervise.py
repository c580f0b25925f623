"""Launch bookkeeping: process table, pipe drainers, notify attribution, durable rows.

Order of a launch, always: the row is written (``starting``) before the process exists,
then the process is spawned, then the row says ``running`` with pid and start ticks. A
crash between the steps leaves a ``starting`` row that reconcile can resolve, because the
launch key is also in the process's environment (``TENURE_LAUNCH_KEY``). A write that
fails once the process exists (disk full, I/O error) never orphans it: the launch is
watched, drained and reported as usual, and kept in memory as ``uncertain`` until its
final state can be written. The writes of launches go through a group commit
(owner.groupcommit): concurrent launches share their commits, and an exit that comes
before its launch has answered is taken up right after that answer.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from protocol.errors import Conflict, LaunchFailed, StorageFailed, TenureError
from protocol.layout import HOME_ID_ENV, home_id
from protocol.seldom import Seldom

from . import stoporder
from .cgroups import CgroupTree
from .descendants import LAUNCH_KEY_ENV, OWNER_HOME_ENV
from .drain import PipeDrainer
from .fdpass import PassFds
from .fdstore import DEFAULT_FDNAME, FdStore, StoreKey
from .groupcommit import GroupCommit
from .journal import Journal, LogSource
from .notes import write_note
from .notify import NotifyListener, pgid_resolver
from .observations import ObservationRing
from .procs import ProcessTable
from .sockets import SocketHolder, socket_key
from .spawn import Spawned
from .specs import ExitStatus, LaunchSpec, StopPolicy
from .stop import StopResult
from .store import LaunchRow, LaunchState, OwnerStore, Tracked

__all__ = ["LAUNCH_KEY_ENV", "Launcher"]

log = logging.getLogger("tenure.owner")

STATUS_TEXT_MAX = 200
"""Characters of an app's last ``STATUS=`` the owner keeps (and reports) per launch."""
TRACK_INTERVAL_S = 1.0
"""How often the descendants of every launch are looked for (process-group mode): the
window in which a process can fork, leave the group and lose its parent unseen."""


class Launcher:
    def __init__(self, store: OwnerStore, journal: Journal, ring: ObservationRing,
                 boot_id: str, notify_path: str, *, reap_orphans: bool = True,
                 home: str = "") -> None:
        self.store = store
        self.writes = GroupCommit(store.db)   # the writes of launches (owner.groupcommit)
        self._launching: dict[str, asyncio.Future[LaunchRow]] = {}
        self._unwritten: set[str] = set()   # running, the row not yet saying so
        self._early_exits: dict[str, tuple[int, ExitStatus]] = {}  # of those, ended
        self.home = home            # OWNER_HOME_ENV of every launch
        self.home_id = home_id(home)   # and its HOME_ID_ENV ("": unreadable)
        self.journal = journal
        self.ring = ring
        self.boot_id = boot_id
        self.live: dict[str, LaunchRow] = {}
        self._stop_order: stoporder.Order | None = None   # owner.stoporder, once read
        self.uncertain: dict[str, LaunchRow] = {}  # rows whose last write failed
        self._by_pgid: dict[int, str] = {}
        self.sockets = SocketHolder()
        self.fdstore = FdStore()
        self.socket_users: dict[str, tuple[str, ...]] = {}  # live launch -> socket keys
        # live launches that sent READY=1 to this owner (inventory's ``ready_notified``)
        self.ready_notified: set[str] = set()
        # the last ``STATUS=`` of each live launch, cut to STATUS_TEXT_MAX (inventory's
        # ``status_text``): what the app says it does, as systemctl status shows it
        self.status_text: dict[str, str] = {}
        self.drainers: dict[tuple[str, str], PipeDrainer] = {}   # (launch key, stream)
        # What owner.db lists as tracked descendants: written only when the set changes.
        self._recorded: dict[tuple[int, int], str] = {}
        self._recorded_revision = 0   # the process table's tracked_revision it reflects
        self.procs = ProcessTable(self._on_exit, notify_socket_path=notify_path,
                                  reap_orphans=reap_orphans)
        self.notify = NotifyListener(notify_path, pgid_resolver(self._by_pgid.get),
                                     self._on_notify, self.fdstore.count_refused)
        self.notify.open()
        self._tracker: asyncio.TimerHandle | None = None
        self._track_trouble = Seldom(30.0)   # recording descendants failing (a full disk)
        self._track()

    def _track(self) -> None:
        """Each TRACK_INTERVAL_S: the descendants of every launch looked for and recorded
        (process-group mode), the cgroups of exited launches that emptied removed
        (cgroup mode), then the exits of uncertain launches written (they waited for the
        owner's shutdown before: owner.md, faults.md)."""
        try:
            self.procs.track()
            if self.procs.cgroups is None:
                self.record_descendants()
            if self.uncertain:
                self.retry_uncertain()
            if self._track_trouble.ended():
                log.warning("recording descendants works again")
        except (sqlite3.Error, OSError) as exc:   # a full disk: said when it begins
            if self._track_trouble.due():          # and every 30 s (was each second)
                log.error("recording descendants failed (retried every %.0f s): %s",
                          TRACK_INTERVAL_S, exc)
        except Exception:
            log.exception("looking for descendants failed")
        self._tracker = asyncio.get_running_loop().call_later(TRACK_INTERVAL_S, self._track)

    @property
    def cgroups(self) -> CgroupTree | None:
        """The delegated cgroup tree when apps get cgroups of their own, else None."""
        return self.procs.cgroups

    def use_cgroups(self, tree: CgroupTree | None) -> None:
        """Give every later launch its own cgroup under ``tree`` (call before the first
        launch; None keeps process groups)."""
        assert not self.live, "cgroup mode must be chosen before any launch"
        self.procs.cgroups = tree

    def notify_stats(self) -> dict[str, int]:
        return dict(self.notify.stats)

    async def launch(self, p: dict[str, Any], spec: LaunchSpec, epoch: int,
                     admit: Callable[[], None] = lambda: None) -> LaunchRow:
        """Write the row, spawn, record the process. Returns the final row (``failed``
        rows included: the caller reports them). The writes go through the group commit
        (owner.groupcommit); ``admit`` runs right before the spawn and raises to refuse
        it (the epoch or the stack's intent may have moved while the row was written):
        the row then says ``failed`` and the exception propagates. A second request for
        a key being launched waits for the first and gets its result.

        Invariant: once the process exists it is watched, drained and reported, whatever
        the storage does. If the ``running`` write fails the launch is kept in memory as
        ``uncertain`` (see :meth:`record`). Raises StorageFailed when the ``starting``
        row cannot be written (sqlite3.Error or OSError when a ``failed`` one cannot):
        then nothing runs.
        """
        key = p["launch_key"]
        if key in self._launching:
            return await self._second(key)
        answer: asyncio.Future[LaunchRow] = asyncio.get_running_loop().create_future()
        self._launching[key] = answer
        try:
            row = await self._launch(p, spec, epoch, admit)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                answer.cancel()
            else:
                answer.set_exception(exc)
                answer.exception()   # retrieved: nobody else may be waiting
            raise
        else:
            answer.set_result(row)
            return row
        finally:   # an early exit waits until this answer is sent (same task)
            self._settled(key)

    async def _second(self, key: str) -> LaunchRow:
        """The answer of the launch of ``key`` under way (a retry of it)."""
        try:
            return await asyncio.shield(self._launching[key])
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise   # this request is the one going away
            raise LaunchFailed("the launch request this one repeats was withdrawn before "
                               "its process was started", {"launch_key": key}) from None

    def _withdrawn(self, key: str) -> None:
        """The request went away (its connection, a shutdown) before the process was
        started: nothing is started, and the row, written or still queued, says so
        after it (a later request for the key gets that answer, not a half launch)."""
        gone = LaunchFailed("the launch request was withdrawn before its process was "
                            "started", {"launch_key": key}).to_wire()
        task = asyncio.ensure_future(self.writes.write(lambda: self.store.mark_failed(
            key, gone)))
        task.add_done_callback(_log_failure)

    def _settled(self, key: str) -> None:
        """Launch ``key`` answered: an exit that came before is taken up now."""
        self._launching.pop(key, None)
        self._unwritten.discard(key)
        early = self._early_exits.pop(key, None)
        if early is not None:
            asyncio.get_running_loop().call_soon(self._on_exit, key, *early)

    async def settle(self) -> None:
        """Return once every launch under way now has its answer (whatever it is)."""
        if self._launching:   # asyncio.wait never cancels what it waits for
            await asyncio.wait(list(self._launching.values()))

    async def answered(self, key: str) -> None:
        """Return once the launch of ``key`` under way, if any, has its answer (whatever
        it is): a stop of the key asked meanwhile then finds its process, instead of
        answering NotFound for a process about to be spawned."""
        answer = self._launching.get(key)
        if answer is not None:   # asyncio.wait never cancels what it waits for
            await asyncio.wait([answer])

    def launching(self, key: str) -> bool:
        """Whether launch ``key`` is under way (its answer not given yet)."""
        return key in self._launching

    async def _launch(self, p: dict[str, Any], spec: LaunchSpec, epoch: int,
                      admit: Callable[[], None]) -> LaunchRow:
        key = p["launch_key"]
        spec = replace(spec, env={**spec.env, LAUNCH_KEY_ENV: key, OWNER_HOME_ENV: self.home,
                                  HOME_ID_ENV: self.home_id})
        tree = self.procs.cgroups
        # The cgroup is recorded with the row, before it exists: after a crash its
        # cgroup.procs is evidence even of a process whose pid was never recorded.
        cgroup = None if tree is None else str(tree.app_dir(key))
        try:
            await self.writes.write(lambda: self.store.insert_launch(
                key, p, spec.to_wire(), epoch, self.boot_id, cgroup))
        except asyncio.CancelledError:
            self._withdrawn(key)
            raise
        except (sqlite3.Error, OSError) as exc:   # nothing written, nothing started
            raise StorageFailed(f"{key}: the launch could not be recorded "
                                f"({type(exc).__name__}: {exc}); nothing was started",
                                {"launch_key": key}) from exc
        try:
            admit()
        except TenureError as exc:
            refused = exc.to_wire()
            await self.writes.write(lambda: self.store.mark_failed(key, refused))
            raise
        try:
            passed = self._passed(p, spec)
            spawned = self.procs.launch(spec, key, passed)
        except LaunchFailed as exc:
            return await self._failed(p, key, exc)
        except Conflict as exc:   # a key whose row was pruned while the table remembers it
            refused = exc.to_wire()
            await self.writes.write(lambda: self.store.mark_failed(key, refused))
            raise
        started_at = time.time()
        row = LaunchRow(key, p["stack"], p["app"], p["instance"], p["generation"],
                        spec.to_wire(), LaunchState.RUNNING, spawned.pid,
                        spawned.start_ticks, spawned.pgid, started_at, None, None, None)
        # Watched before the write, which may wait for its group: the process runs and
        # may even end meanwhile; its exit is then taken up once this launch answered.
        self._watch(row, spawned)
        self._unwritten.add(key)
        try:
            await self.writes.write(lambda: self.store.mark_running(
                key, spawned.pid, spawned.start_ticks, spawned.pgid, started_at))
        except (sqlite3.Error, OSError) as exc:
            row = self._uncertain(row, "running", exc)
            if key in self.live:
                self.live[key] = row
        if spec.sockets:
            self.socket_users[key] = tuple(socket_key(row.stack, row.app, d)
                                           for d in spec.sockets)
        return row

    async def _failed(self, p: dict[str, Any], key: str, exc: LaunchFailed) -> LaunchRow:
        await self.writes.write(lambda: self.store.mark_failed(key, exc.to_wire()))
        spawn = exc.data.get("spawn")
        self.ring.emit("launch_failed", launch_key=key, code=exc.code_str, msg=exc.msg,
                       **({} if spawn is None else {"spawn": spawn}))
        write_note(self.journal, LogSource(p["stack"], p["app"], p["instance"],
                                           p["generation"]),
                   spawn["text"] if spawn else f"launch failed: {exc.msg}")
        row = self.store.get_launch(key)
        assert row is not None
        return row

    def _passed(self, p: dict[str, Any], spec: LaunchSpec) -> PassFds | None:
        """The fds of a launch: its sockets (bound now if not held yet), then what its
        instance stored. Raises SocketUnavailable."""
        held = [self.sockets.ensure(p["stack"], p["app"], d) for d in spec.sockets]
        stored = self.fdstore.for_launch((p["stack"], p["app"], p["instance"]),
                                         spec.fd_store_max)
        if not held and not stored:
            return None
        return PassFds(tuple(h.fileno() for h in held) + tuple(s.fd for s in stored),
                       tuple(h.decl.name for h in held) + tuple(s.name for s in stored))

    def sockets_in_use(self) -> dict[str, list[str]]:
        """Socket key -> the live launches that were given it."""
        out: dict[str, list[str]] = {}
        for launch, keys in self.socket_users.items():
            for k in keys:
                out.setdefault(k, []).append(launch)
        return out

    def _uncertain(self, row: LaunchRow, what: str, exc: Exception) -> LaunchRow:
        err = StorageFailed(f"{row.launch_key}: recording {what} failed: "
                            f"{type(exc).__name__}: {exc}", {"launch_key": row.launch_key})
        log.error("%s; the launch is kept in memory as uncertain", err.msg)
        row = replace(row, state=LaunchState.UNCERTAIN, error=err.to_wire())
        self.uncertain[row.launch_key] = row
        self.ring.emit("launch_uncertain", launch_key=row.launch_key, pid=row.pid,
                       start_ticks=row.start_ticks, code=err.code_str, msg=err.msg)
        return row

    def _watch(self, row: LaunchRow, spawned: Spawned) -> None:
        key = row.launch_key
        self.live[key] = row
        self._by_pgid[spawned.pgid] = key
        src = LogSource(row.stack, row.app, row.instance, row.generation)
        loop = asyncio.get_running_loop()
        for fd, stream in ((spawned.stdout_fd, "stdout"), (spawned.stderr_fd, "stderr")):
            self.drainers[(key, stream)] = PipeDrainer(
                loop, fd, self.journal, src, stream,
                on_eof=functools.partial(self._drained, (key, stream)))
        self.ring.emit("launched", launch_key=key, stack=row.stack, app=row.app,
                       instance=row.instance, generation=row.generation, pid=spawned.pid,
                       start_ticks=spawned.start_ticks)

    def draining(self) -> set[str]:
        """The launch keys whose output pipes are still open (a process the owner does
        not track may hold one after the launch ended): their rows stay (launches.prune),
        so a key is never launched again while its drainers still read."""
        return {key for key, _stream in self.drainers}

    def _drained(self, which: tuple[str, str]) -> None:
        """A pipe reached EOF: its drainer is done (O(1): an exit at 1,000 apps used to
        rebuild the list of all of them)."""
        self.drainers.pop(which, None)

    def record_descendants(self) -> None:
        """Make owner.db list exactly the descendants the process table tracks, so that
        after an owner crash they are evidence (admission, reconcile) even when their
        launch's row says it exited. Writes nothing when nothing changed. Raises
        sqlite3.Error or OSError when the write fails (retried at the next call)."""
        revision = self.procs.tracked_revision
        if revision == self._recorded_revision:
            return   # nothing tracked changed since the map was last written
        now = self.procs.descendants()
        if now == self._recorded:
            self._recorded_revision = revision
            return
        added = [Tracked(pid, ticks, key, self.boot_id) for (pid, ticks), key in now.items()
                 if self._recorded.get((pid, ticks)) != key]
        self.store.record_descendants(added, [t for t in self._recorded if t not in now])
        self._recorded, self._recorded_revision = now, revision

    def record(self, key: str) -> LaunchRow | None:
        """What the owner knows of launch ``key`` in memory: a live launch, or one whose
        state could not be written (``uncertain``). None: ask the store."""
        return self.live.get(key) or self.uncertain.get(key)

    def retry_uncertain(self) -> list[str]:
        """Write what could not be written before (the exit of uncertain launches that
        ended); returns the keys still unrecorded (live ones included). Raises nothing.
        Call it after :meth:`record_descendants` succeeded: an exit is written only after
        its descendants."""
        for key, row in list(self.uncertain.items()):
            if key in self.live or row.exit is None:
                continue
            try:
                self.store.mark_exited(key, row.exit, started=row)
            except (sqlite3.Error, OSError):
                continue
            del self.uncertain[key]
        return sorted(self.uncertain)

    def _on_exit(self, key: str, pid: int, status: ExitStatus) -> None:
        if key in self._unwritten:   # its launch has not answered: the exit follows it
            self._early_exits[key] = (pid, status)
            return
        row = self.live.pop(key, None)
        self.socket_users.pop(key, None)
        self.ready_notified.discard(key)
        self.status_text.pop(key, None)
        if row is not None and row.pgid is not None:
            self._by_pgid.pop(row.pgid, None)
        # The event goes out first: a subscriber learns of the exit without waiting for
        # the write. If the owner died in between, the row still says running and
        # reconcile proves the process gone, so nothing is lost or invented.
        ended = {**status.to_wire(), "stopped": self.procs.stop_asked(key)}
        # Named only when some are (the backend stops them), and not during a stop asked
        # of the launch: that stop ends its group and descendants with it, and those
        # the signal has not ended yet at the leader's exit were not left running.
        left = 0 if ended["stopped"] else self.procs.left_behind(key)
        self.ring.emit("exit", launch_key=key, pid=pid, **ended,
                       **({"descendants": left} if left else {}))
        started = self.uncertain.get(key)
        try:
            # Descendants first: once the row says exited, only they name what outlived
            # the leader (found by the table's last look before the reap).
            self.record_descendants()
            self.store.mark_exited(key, ended, started=started)
        except (sqlite3.Error, OSError) as exc:
            base = started or row
            if base is not None:
                self._uncertain(replace(base, exit=ended, ended_at=time.time()),
                                "the exit", exc)
            return
        self.uncertain.pop(key, None)

    def _on_notify(self, key: str, sender: int, fields: dict[str, str],
                   fds: list[int]) -> None:
        """Owns ``fds`` (those of an ``FDSTORE=1`` message): stored or closed."""
        self.ring.emit("notify", launch_key=key, pid=sender, fields=fields)
        row = self.live.get(key)
        if row is not None and fields.get("READY") == "1":
            self.ready_notified.add(key)
        if row is not None and fields.get("STATUS"):
            self.status_text[key] = fields["STATUS"][:STATUS_TEXT_MAX]
        elif "STATUS" in fields:   # STATUS= clears it, as under systemd
            self.status_text.pop(key, None)
        store: StoreKey | None = None if row is None else (row.stack, row.app, row.instance)
        name = fields.get("FDNAME", DEFAULT_FDNAME)
        if fields.get("FDSTORE") == "1":
            limit = int((row.spec if row else {}).get("fd_store_max", 0))
            kept = store is not None and self.fdstore.add(store, name, fds, limit)
            if store is None:
                self.fdstore.add(("", "", 0), name, fds, 0)  # closes them, counted
            self.ring.emit("fd_store", launch_key=key, name=name, fds=len(fds),
                           stored=kept, limit=limit)
        if fields.get("FDSTOREREMOVE") == "1" and store is not None:
            removed = self.fdstore.remove(store, name)
            self.ring.emit("fd_store_remove", launch_key=key, name=name, removed=removed)

    async def stop(self, key: str, policy: StopPolicy | None) -> StopResult:
        """Confirmed stop of launch ``key``. Raises NotFound."""
        return await self.procs.stop(key, policy)

    async def stop_all(self) -> list[tuple[str, StopResult | BaseException]]:
        """Stop every live launch, and every exited one whose descendants still run,
        each with its own policy: level by level of the stop order (owner.stoporder),
        the launches of a level concurrently."""
        self.procs.track()
        out: list[tuple[str, StopResult | BaseException]] = []
        for group in self._stop_levels():
            results = await asyncio.gather(*(self.stop(k, None) for k in group),
                                           return_exceptions=True)
            out += zip(group, results, strict=True)
        return out

    def stop_budget(self) -> float:
        """The longest the stop of every launch that may still run can take by their own
        policies, level after level of the stop order; 0 with none."""
        policies = self.procs.policies()
        return stoporder.budget(self._stop_levels(), lambda k: policies.get(k, 0.0))

    def _stop_levels(self) -> list[list[str]]:
        keys = [*self.live, *(k for k in self.procs.lingering() if k not in self.live)]
        if self._stop_order is None:   # read once: what the backend tells replaces it
            self._stop_order = stoporder.load(self.store.stop_order)
        return stoporder.levels(keys, self._app_of, self._stop_order)

    def set_stop_order(self, order: dict[str, list[list[str]]]) -> None:
        """Keep ``order`` (stack -> levels of app names) for the shutdown, durably."""
        self.store.set_stop_order(order)
        self._stop_order = order

    def _app_of(self, key: str) -> tuple[str, str] | None:
        """(stack, app) of launch ``key``; None when its row cannot be read (it stops
        with the first level)."""
        try:
            row = self.live.get(key) or self.store.get_launch(key)
        except (sqlite3.Error, TenureError):
            return None
        return None if row is None else (row.stack, row.app)

    async def wait_drained(self, timeout: float) -> bool:
        """Wait until every pipe reached EOF (all output is in the journal)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(not d.closed for d in self.drainers.values()):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def close(self) -> None:
        if self._tracker is not None:
            self._tracker.cancel()
            self._tracker = None
        self.notify.close()
        for d in self.drainers.values():
            d.close()
        self.drainers.clear()
        self.procs.close()
        self.sockets.close_all()
        self.fdstore.close_all()


def _log_failure(task: asyncio.Future[Any]) -> None:
    """A background write never fails silently."""
    if not task.cancelled() and task.exception() is not None:
        log.error("recording a withdrawn launch failed: %s", task.exception())
