"""What a stop or a signal acts on: one launch, as :func:`owner.stop.confirm_stop` sees it.

:class:`GroupTarget` (process-group mode) is the launch's process group while its
leader is unreaped, plus every tracked descendant (:mod:`owner.descendants`).
:class:`CgroupTarget` (a delegated cgroup) is exactly the launch's ``cgroup.procs``.
Both signal only processes proven to be the launch's: the group through its id only
while the unreaped leader pins that id, everything else through a pidfd opened before
the process is checked.
"""

from __future__ import annotations

import contextlib
import os
import signal as _signal
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from protocol.procfs import group_members

from .cgroups import CgroupTree, members, members_strict
from .descendants import Descendants
from .spawn import Spawned
from .specs import ExitStatus

__all__ = ["CgroupTarget", "GroupTarget", "Launch"]


class Launch(Protocol):
    """The table's record of one launch, as far as a target needs it."""

    spawned: Spawned
    exit: ExitStatus | None
    tree: Descendants | None


class GroupTarget:
    """A launch in process-group mode: its group while the leader is unreaped, and every
    process it is known to have spawned. ``refresh_orphans(since)`` runs before each
    look so orphans re-parented to the owner are attributed first, from a look for them
    begun after ``since`` (the stops under way share such looks)."""

    def __init__(self, launch: Launch, refresh_orphans: Callable[[float], object]) -> None:
        assert launch.tree is not None
        self._launch = launch
        self._tree = launch.tree
        self._refresh_orphans = refresh_orphans
        self._unsure = False

    def leader_exit(self) -> ExitStatus | None:
        return self._launch.exit

    def _pinned(self) -> bool:
        # Until we reap the leader its zombie holds the number: no other process can
        # have it, so no other group or session can have it as id either.
        return self._launch.exit is None

    def _refresh(self) -> bool:
        pinned = self._pinned()
        self._refresh_orphans(self._tree.lost_at)
        lost = self._tree.lost_at
        self._tree.refresh(pinned)
        # one ended just now: its children are the owner's, and no look begun since has
        # seen them; the next check (20 ms on) takes one, shared with the other stops
        self._unsure = self._tree.lost_at != lost
        return pinned

    def group_alive(self) -> bool:
        """Whether anything of the launch still runs (zombies do not); True too while
        a process it lost may have left children no look has seen yet."""
        pinned = self._refresh()
        if self._unsure:
            return True
        if pinned and group_members(self._launch.spawned.pgid, include_session=True):
            return True
        if self._tree.alive():
            return True
        if not self._tree.known:
            return False
        # What ended since the refresh is taken up as the refresh takes it up: its
        # children are the owner's, and a look must see them before the stop is
        # confirmed. Left tracked, the next stop of the launch found it gone, and
        # answered `stopped` for a launch with nothing left.
        lost = self._tree.lost_at
        self._tree.refresh(pinned)
        self._unsure = self._tree.lost_at != lost
        return self._unsure

    def send(self, sig: int) -> None:
        """The group by its id while pinned; every tracked process outside it, one by
        one. Nothing left is no error."""
        pinned = self._refresh()
        pgid = self._launch.spawned.pgid
        if pinned:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
        self._tree.send(sig, skip_pgid=pgid if pinned else None)


class CgroupTarget:
    """A launch in its own cgroup: membership is ``cgroup.procs``, exactly.

    The leader joins the cgroup through the shim right after Popen returns, so for a
    moment it may still be outside: until it is reaped it is counted and signalled on
    its own (through its pidfd). Nothing of the app can run outside the cgroup, because
    the shim execs the program only after joining.
    """

    def __init__(self, launch: Launch, tree: CgroupTree, closed: Callable[[], bool]) -> None:
        self._launch = launch
        self._tree = tree
        self._closed = closed
        assert launch.spawned.cgroup is not None
        self.path = Path(launch.spawned.cgroup)

    def leader_exit(self) -> ExitStatus | None:
        return self._launch.exit

    def group_alive(self) -> bool:
        """Whether anything of the launch still runs: its leader unreaped, or a member
        listed; also when ``cgroup.procs`` could not be read (the owner out of
        descriptors), since a failed read is no proof that the cgroup is empty."""
        if self._launch.exit is None:
            return True
        try:
            return bool(members_strict(self.path))
        except OSError:
            return True

    def send(self, sig: int) -> None:
        sp = self._launch.spawned
        pids = members(self.path)
        if self._launch.exit is None and sp.pid not in pids:
            # Still the shim, not yet in the cgroup: the pidfd cannot hit a stranger.
            with contextlib.suppress(ProcessLookupError, OSError):
                if sp.pidfd is not None and not self._closed():
                    _signal.pidfd_send_signal(sp.pidfd, sig)
                else:
                    os.kill(sp.pid, sig)
        if sig == _signal.SIGKILL and self._tree.kill(self.path):
            return  # one write kills every member, forks in flight included
        _signal_members(self.path, pids, sig)


def _signal_members(path: Path, pids: list[int], sig: int) -> None:
    """Signal ``pids`` read from ``path``/cgroup.procs, each only if it is still a member
    once a pidfd for it is open: a member that exited and whose number was reused
    meanwhile is never hit (its pidfd names the dead process, or the number is no longer
    listed)."""
    fds: dict[int, int] = {}
    try:
        for pid in pids:
            with contextlib.suppress(OSError):
                fds[pid] = os.pidfd_open(pid)
        still = set(members(path))
        for pid, fd in fds.items():
            if pid in still:
                with contextlib.suppress(OSError):
                    _signal.pidfd_send_signal(fd, sig)
    finally:
        for fd in fds.values():
            os.close(fd)
