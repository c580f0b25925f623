"""The process table's exit detection: a leader's exit seen (its pidfd readable, or
SIGCHLD), the last look at what it left, its reap, and the report of its exit, exactly
once, to ``on_exit``; orphans reaped as they end. A part of owner.procs.ProcessTable,
apart for size.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from .descendants import Descendants
from .procentry import ExitMode, LaunchEntry
from .procinfo import group_members, read_stat
from .proctrack import Tracking
from .reaper import reap_orphans
from .spawn import Spawned
from .specs import ExitStatus

__all__ = ["EXITED_MEMORY", "LAST_LOOKS", "LOOK_AGAIN_S", "Reaping"]

log = logging.getLogger("owner.procs")   # the process table's one logger

# Exited launches are remembered so a late stop/signal still finds the group; bounded so a
# long-lived owner does not grow without limit. One whose descendants still run is kept
# until they are gone. An entry holds its process record, stop policy, descendants and
# an event, about 2.6 KiB: 10,000 of them grew a restart-heavy owner by up to 25 MiB (the
# soak). A stop of a launch forgotten here answers NOT_FOUND, which the backend takes
# for "already gone", as it is.
EXITED_MEMORY = 1_000

_LOST = ExitStatus(None, None)

# A leader's exit is taken up only once what it left is attributed (the last look). A
# child seen in the middle of an exec, its environment not yet readable and its group
# already its own (setsid), cannot be: the reap waits for it, looking again every
# LOOK_AGAIN_S, at most LAST_LOOKS times (~50 ms), then goes on without it.
LOOK_AGAIN_S = 0.001
LAST_LOOKS = 50


class Reaping(Tracking):
    """Exits of the table's launches, and orphans reaped."""

    def reap_orphans(self) -> int:
        """Reap exited children that are not tracked launches (tracked ones go through
        the normal exit path). Returns how many orphans were reaped."""
        n = reap_orphans(self._by_pid.__contains__, self._tracked_zombie)
        self.orphans_reaped += n
        return n

    def _tracked_zombie(self, pid: int) -> None:
        """A launch's leader found exited while reaping orphans. One its pidfd watches
        is left to the pidfd's callback, which shares its turn's look for orphans
        (:meth:`_turn_look`): taken here, each such exit looked on its own, the part of
        a mass stop still O(N^2). The orphans it hides from ``waitid`` are reaped again
        once it is (:meth:`_finish`)."""
        key = self._by_pid.get(pid)
        entry = None if key is None else self._live.get(key)
        if entry is not None and self.mode is ExitMode.PIDFD and \
                entry.spawned.pidfd is not None and entry.looks == 0:
            self._orphans_behind = True
            return
        self._try_reap(pid)
    def _on_sigchld(self) -> None:
        if self.mode is ExitMode.SIGCHLD:
            for pid in list(self._by_pid):
                self._try_reap(pid)
        if self._reap_orphans:
            self.reap_orphans()

    def _exit_seen(self, pid: int) -> None:
        """A leader's pidfd is readable: it exited before this turn of the loop polled."""
        self._try_reap(pid, this_turn=True)

    def _try_reap(self, pid: int, this_turn: bool = False) -> None:
        key = self._by_pid.get(pid)
        if key is None:
            return
        entry = self._live[key]
        if entry.tree is not None and self._has_exited(entry.spawned):
            unsettled = self._last_look(entry, entry.tree, this_turn)
            if unsettled and self._look_again(entry, unsettled):
                return
        status = self._collect(entry.spawned)
        if status is not None:
            self._finish(entry, status)

    def _last_look(self, entry: LaunchEntry, tree: Descendants, this_turn: bool = False
                   ) -> list[tuple[int, int]]:
        """Track what outlives the leader, while its zombie still pins its group and
        session id (no other process can have that number until we reap it). Returns
        the owner's children that were mid-exec (see :meth:`adopt_orphans`).

        Its children are ours already (re-parented: the owner is a subreaper), and
        attributed by group or session now. A table in a process that is not a
        subreaper does not receive them, so it scans for members of the group and
        session instead (a /proc scan per exit; only tests and tools run so).

        ``this_turn``: the leader's exit was seen by this turn of the event loop's poll
        (its pidfd was readable), so it exited, and its children were re-parented to
        us, before the turn began: a look taken during this turn sees them, and the
        exits of one turn share it (:meth:`_turn_look`). A mass stop looked once per
        exit, each look reading the owner's whole list of children: O(N^2)."""
        unsettled = []
        if self._reap_orphans:
            unsettled = self._turn_look() if this_turn else self.adopt_orphans()
        else:
            for pid in group_members(entry.spawned.pgid, include_session=True):
                st = read_stat(pid)
                if st is not None and pid != entry.spawned.pid:
                    tree.adopt(pid, st.start_ticks)
        lost = tree.lost_at
        tree.refresh(leader_unreaped=True)
        if self._reap_orphans and this_turn and tree.lost_at != lost:
            # one of its processes ended after the turn's look may have begun: a look
            # of its own sees that one's children
            unsettled = self.adopt_orphans()
            tree.refresh(leader_unreaped=True)
        return unsettled

    def _turn_look(self) -> list[tuple[int, int]]:
        """The look for orphans taken during this turn of the event loop, or one taken
        now. A turn runs the callbacks queued before it began; the one queued here runs
        first in the next turn, before any exit that turn's poll sees, and ends the
        look's use."""
        if self._turn_unsettled is None:
            self._turn_unsettled = self.adopt_orphans()
            self._loop.call_soon(self._end_turn_look)
        return list(self._turn_unsettled)

    def _end_turn_look(self) -> None:
        self._turn_unsettled = None

    def _look_again(self, entry: LaunchEntry, unsettled: list[tuple[int, int]]) -> bool:
        """Leave ``entry``'s leader unreaped (its zombie pins its group and session) and
        take the last look again in a moment, while ``unsettled`` children are mid-exec;
        False once LAST_LOOKS were taken (those children are then not waited for
        again)."""
        if entry.looks >= LAST_LOOKS:
            self._never_settled.update(unsettled)
            log.warning("children %s of the owner belong to no launch it can tell (they "
                        "left their group and session and cleared their environment; "
                        "looked for at the exit of %s, which may not be theirs): they "
                        "are stopped as unclaimed at shutdown (docs/owner.md)",
                        [pid for pid, _ in unsettled], entry.key)
            return False
        entry.looks += 1
        sp = entry.spawned
        if self.mode is ExitMode.PIDFD and sp.pidfd is not None:
            self._loop.remove_reader(sp.pidfd)   # readable until reaped: no busy loop
        self._loop.call_later(LOOK_AGAIN_S, self._reap_later, sp.pid)
        return True

    def _reap_later(self, pid: int) -> None:
        if not self._closed:
            self._try_reap(pid)

    def _has_exited(self, sp: Spawned) -> bool:
        """Whether ``sp`` is a zombie, without reaping it (WNOWAIT)."""
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        try:
            if self.mode is ExitMode.PIDFD and sp.pidfd is not None:
                return os.waitid(os.P_PIDFD, sp.pidfd, flags) is not None
            return os.waitid(os.P_PID, sp.pid, flags) is not None
        except ChildProcessError:
            return False

    def _collect(self, sp: Spawned) -> ExitStatus | None:
        """Reap ``sp`` if it has exited; None if it still runs. A status someone else
        consumed (ECHILD) is reported as lost rather than waited for forever."""
        try:
            if self.mode is ExitMode.PIDFD and sp.pidfd is not None:
                res = os.waitid(os.P_PIDFD, sp.pidfd, os.WEXITED | os.WNOHANG)
                return None if res is None else ExitStatus.from_waitid(res.si_code,
                                                                       res.si_status)
            wpid, status = os.waitpid(sp.pid, os.WNOHANG)
            return None if wpid == 0 else ExitStatus.from_wait_status(status)
        except ChildProcessError:
            log.warning("exit status of %d was taken by someone else", sp.pid)
            return _LOST

    def _finish(self, entry: LaunchEntry, status: ExitStatus) -> None:
        sp = entry.spawned
        del self._live[entry.key]
        del self._by_pid[sp.pid]
        self._close_pidfd(sp)
        entry.ended(status)
        self._exited[entry.key] = entry
        if entry.tree is not None and entry.tree.known:
            self._lingering[entry.key] = entry
        elif self.cgroups is not None and sp.cgroup is not None:
            # What outlived the leader is in its cgroup (a daemon's forked child): it
            # lingers, as tracked descendants do, until a stop ends it or track() finds
            # the cgroup empty, and is removed then. Empty, it goes now.
            if self._populated(entry):
                self._lingering[entry.key] = entry
            else:
                self.cgroups.remove(Path(sp.cgroup))
        while len(self._exited) > EXITED_MEMORY:
            key, old = self._exited.popitem(last=False)  # a lingering one stays there
            if self._by_leader.get(old.spawned.pid) == key and key not in self._lingering:
                del self._by_leader[old.spawned.pid]
        try:
            self._on_exit(entry.key, sp.pid, status)
        except Exception:
            log.exception("on_exit callback failed for %s (pid %d)", entry.key, sp.pid)
        if self._orphans_behind and not self._closed:   # what waitid showed behind it
            self._orphans_behind = False
            self._loop.call_soon(self._reap_orphans_again)

    def _reap_orphans_again(self) -> None:
        if not self._closed:
            self.reap_orphans()

    def _close_pidfd(self, sp: Spawned) -> None:
        if sp.pidfd is None:
            return
        if self.mode is ExitMode.PIDFD:
            self._loop.remove_reader(sp.pidfd)
        with contextlib.suppress(OSError):
            os.close(sp.pidfd)
