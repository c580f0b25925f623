"""The process table's tracking of what outlives a launch's leader: orphans re-parented
to the owner attributed to the launch they came from, the descendants of every launch
refreshed, exited launches that still have processes (lingering) kept until those are
gone. A part of owner.procs.ProcessTable, apart for size.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from protocol.procfs import main_thread_children

from .cgroups import members, members_strict
from .descendants import MidExec, attribute_orphan
from .procentry import LaunchEntry, TableState
from .stop import POLL_INTERVAL_S

__all__ = ["SHARED_SCAN_S", "Tracking"]

log = logging.getLogger("owner.procs")   # the process table's one logger

SHARED_SCAN_S = 0.002
"""Stops under way share one look for orphans ended this long ago: each stop looks
before every check of its group (every 20 ms) and every signal, and a look reads the
owner's whole list of children, so N stops at once cost O(N^2): a stack stop of 2,500
apps took 9 s, `down` of 5,000 ran past its minute, and the owner answered nothing
meanwhile. A look is shared only if it began after the stop's launch last lost a
tracked process (whose children it must see); the exits one turn of the event loop
sees share that turn's look (ProcessTable._turn_look), under the same condition."""


class Tracking(TableState):
    """Descendants and orphans of the table's launches."""

    def _adopt_orphans_shared(self, since: float) -> None:
        """:meth:`adopt_orphans`, unless the last look began after ``since`` (the last
        time the caller's tree lost a process, whose children the look must see) and
        ended less than SHARED_SCAN_S (or four times as long as it took: with thousands
        of apps a look takes milliseconds) ago, or within a stop's poll interval."""
        took = self._looked_at - self._look_began if self._looked_at > self._look_began \
            else 0.0   # how long the last look took (none yet: 0)
        fresh = max(SHARED_SCAN_S, 4 * took, POLL_INTERVAL_S)
        if self._look_began <= since or time.monotonic() - self._looked_at >= fresh:
            self.adopt_orphans()

    def track(self) -> None:
        """Refresh the descendants of every launch that may have some: the live ones and
        exited ones whose descendants still ran at the last look. Attributes orphans
        first. The owner runs this on a timer; stops refresh on their own."""
        if self.cgroups is None:   # a cgroup knows its members: nothing to attribute
            self.adopt_orphans()
        for entry in [*self._live.values(), *self._lingering.values()]:
            if entry.tree is not None:
                entry.tree.refresh(entry.exit is None)
        for key, entry in list(self._lingering.items()):
            if entry.tree is not None and not entry.tree.known:
                del self._lingering[key]
            elif entry.tree is None and not self._populated(entry):
                del self._lingering[key]
                assert self.cgroups is not None
                self.cgroups.remove(self._cgroup(entry))

    @staticmethod
    def _cgroup(entry: LaunchEntry) -> Path:
        assert entry.spawned.cgroup is not None
        return Path(entry.spawned.cgroup)

    def _populated(self, entry: LaunchEntry) -> bool:
        """Whether the cgroup of ``entry`` still has a member; also when its list could
        not be read (the owner out of descriptors): a failed read is no proof that
        nothing of the app runs."""
        try:
            return bool(members_strict(self._cgroup(entry)))
        except OSError:
            return True

    def adopt_orphans(self) -> list[tuple[int, int]]:
        """Attribute untracked children of this process (orphans re-parented to the
        subreaper) to the launch they came from; returns those (pid, start ticks) that
        could not be attributed because they were mid-exec (:class:`MidExec`)."""
        self._look_began = time.monotonic()
        try:
            return self._adopt_orphans()
        finally:
            self._looked_at = time.monotonic()

    def _adopt_orphans(self) -> list[tuple[int, int]]:
        kids = main_thread_children(os.getpid())   # where orphans go
        untracked = set(kids).difference(self._by_pid)   # at each exit: mostly empty
        if self._never_settled:
            self._never_settled = {t for t in self._never_settled if t[0] in untracked}
        if untracked:
            for entry in [*self._live.values(), *self._lingering.values()]:
                if entry.tree is not None:
                    untracked.difference_update(entry.tree.known)
        unsettled = []
        for pid in kids:
            if pid not in untracked:
                continue
            found = attribute_orphan(pid, self._group_owner)
            if isinstance(found, MidExec):
                if (pid, found.start_ticks) not in self._never_settled:
                    unsettled.append((pid, found.start_ticks))
                continue
            owner = None if found is None else self._find(found[0])
            if found is None or owner is None or owner.tree is None:
                log.debug("child %d belongs to no launch we know", pid)
                continue
            owner.tree.adopt(pid, found[1])
            if owner.exit is not None:
                self._lingering[owner.key] = owner
        return unsettled

    def _group_owner(self, gid: int) -> str | None:
        """The launch whose process group or session has id ``gid``, when certain.

        While a leader is unreaped its zombie holds the number: the group and session
        with that id are its launch's. After the reap the number is still the launch's
        while its group or session has a member, and a tracked process of the launch
        that is still in it proves that (the number cannot have been reused meanwhile).
        """
        key = self._by_pid.get(gid)
        if key is not None:
            return key
        key = self._by_leader.get(gid)
        entry = None if key is None else self._find(key)
        if entry is not None and entry.tree is not None and entry.tree.holds(gid):
            return entry.key
        return None

    def _tracked_changed(self) -> None:
        self.tracked_revision += 1

    def descendants(self) -> dict[tuple[int, int], str]:
        """Every tracked descendant, (pid, start ticks) -> launch key: of live launches
        and of exited ones whose descendants still ran at the last look."""
        return {(pid, ticks): e.key
                for e in [*self._live.values(), *self._lingering.values()]
                if e.tree is not None for pid, ticks in e.tree.known.items()}

    def left_behind(self, key: str) -> int:
        """How many processes of exited launch ``key`` outlived its leader: its tracked
        descendants running at the last look, or the members of its cgroup now (0 for a
        live or unknown launch)."""
        entry = self._lingering.get(key)
        if entry is None:
            return 0
        if entry.tree is None:
            return len(members(self._cgroup(entry)))
        return len(entry.tree.known)

    def lingering(self) -> list[str]:
        """Keys of exited launches whose descendants were still running, or whose cgroup
        still had members, at the last look (a stop of such a key stops them)."""
        return [k for k, e in self._lingering.items() if e.tree is None or e.tree.known]
