"""Launch bookkeeping: process table, pipe drainers, notify attribution, durable rows.

Order of a launch, always: the row is written (``starting``) before the process exists,
then the process is spawned, then the row says ``running`` with pid and start ticks. A
crash between the steps leaves a ``starting`` row that reconcile can resolve, because the
launch key is also in the process's environment (``TENURE_LAUNCH_KEY``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from protocol.errors import LaunchFailed

from .cgroups import CgroupTree
from .descendants import LAUNCH_KEY_ENV
from .drain import PipeDrainer
from .journal import Journal, LogSource
from .notify import NotifyListener, pgid_resolver
from .observations import ObservationRing
from .procs import ProcessTable
from .specs import ExitStatus, LaunchSpec, StopPolicy
from .stop import StopResult
from .store import LaunchRow, OwnerStore

__all__ = ["LAUNCH_KEY_ENV", "Launcher"]

log = logging.getLogger("tenure.owner")

TRACK_INTERVAL_S = 1.0
"""How often the descendants of every launch are looked for (process-group mode): the
window in which a process can fork, leave the group and lose its parent unseen."""


class Launcher:
    def __init__(self, store: OwnerStore, journal: Journal, ring: ObservationRing,
                 boot_id: str, notify_path: str, *, reap_orphans: bool = True) -> None:
        self.store = store
        self.journal = journal
        self.ring = ring
        self.boot_id = boot_id
        self.live: dict[str, LaunchRow] = {}
        self._by_pgid: dict[int, str] = {}
        self.drainers: list[PipeDrainer] = []
        self.procs = ProcessTable(self._on_exit, notify_socket_path=notify_path,
                                  reap_orphans=reap_orphans)
        self.notify = NotifyListener(notify_path, pgid_resolver(self._by_pgid.get),
                                     self._on_notify)
        self.notify.open()
        self._tracker: asyncio.TimerHandle | None = None
        self._track()

    def _track(self) -> None:
        if self.procs.cgroups is None:
            try:
                self.procs.track()
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

    def launch(self, p: dict[str, Any], spec: LaunchSpec, epoch: int) -> LaunchRow:
        """Write the row, spawn, record the process. Returns the final row (``failed``
        rows included: the caller reports them)."""
        key = p["launch_key"]
        spec = replace(spec, env={**spec.env, LAUNCH_KEY_ENV: key})
        self.store.insert_launch(key, p, spec.to_wire(), epoch, self.boot_id)
        try:
            spawned = self.procs.launch(spec, key)
        except LaunchFailed as exc:
            self.store.mark_failed(key, exc.to_wire())
            self.ring.emit("launch_failed", launch_key=key, code=exc.code_str, msg=exc.msg)
            row = self.store.get_launch(key)
            assert row is not None
            return row
        self.store.mark_running(key, spawned.pid, spawned.start_ticks, spawned.pgid)
        row = self.store.get_launch(key)
        assert row is not None
        self.live[key] = row
        self._by_pgid[spawned.pgid] = key
        src = LogSource(row.stack, row.app, row.instance, row.generation)
        loop = asyncio.get_running_loop()
        for fd, stream in ((spawned.stdout_fd, "stdout"), (spawned.stderr_fd, "stderr")):
            self.drainers.append(PipeDrainer(loop, fd, self.journal, src, stream,
                                             on_eof=self._prune_drainers))
        self.ring.emit("launched", launch_key=key, stack=row.stack, app=row.app,
                       instance=row.instance, generation=row.generation, pid=spawned.pid,
                       start_ticks=spawned.start_ticks)
        return row

    def _prune_drainers(self) -> None:
        self.drainers = [d for d in self.drainers if not d.closed]

    def _on_exit(self, key: str, pid: int, status: ExitStatus) -> None:
        row = self.live.pop(key, None)
        if row is not None and row.pgid is not None:
            self._by_pgid.pop(row.pgid, None)
        # The event goes out first: a subscriber learns of the exit without waiting for
        # the fsync. If the owner died in between, the row still says running and
        # reconcile proves the process gone, so nothing is lost or invented.
        self.ring.emit("exit", launch_key=key, pid=pid, **status.to_wire())
        self.store.mark_exited(key, status.to_wire())

    def _on_notify(self, key: str, sender: int, fields: dict[str, str]) -> None:
        self.ring.emit("notify", launch_key=key, pid=sender, fields=fields)

    async def stop(self, key: str, policy: StopPolicy | None) -> StopResult:
        """Confirmed stop of launch ``key``. Raises NotFound."""
        return await self.procs.stop(key, policy)

    async def stop_all(self) -> list[tuple[str, StopResult | BaseException]]:
        """Stop every live launch, and every exited one whose descendants still run,
        concurrently, each with its own policy."""
        self.procs.track()
        keys = [*self.live, *(k for k in self.procs.lingering() if k not in self.live)]
        results = await asyncio.gather(*(self.stop(k, None) for k in keys),
                                       return_exceptions=True)
        return list(zip(keys, results, strict=True))

    async def wait_drained(self, timeout: float) -> bool:
        """Wait until every pipe reached EOF (all output is in the journal)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(not d.closed for d in self.drainers):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def close(self) -> None:
        if self._tracker is not None:
            self._tracker.cancel()
            self._tracker = None
        self.notify.close()
        for d in self.drainers:
            d.close()
        self.drainers.clear()
        self.procs.close()

