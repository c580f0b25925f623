"""The process table's record of one launch and the state its parts share.

:class:`TableState` declares what owner.procs.ProcessTable holds; the parts of the table
(owner.proctrack, owner.procexits, owner.procs) build on it, each adding its own job.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from protocol.errors import NotFound

from .cgroups import CgroupTree
from .descendants import Descendants
from .spawn import Spawned, Spawner
from .specs import ExitStatus, StopPolicy

__all__ = ["ExitMode", "LaunchEntry", "OnExit", "TableState"]

OnExit = Callable[[str, int, ExitStatus], None]  # launch key, leader pid, its exit


class ExitMode(StrEnum):
    PIDFD = "pidfd"
    SIGCHLD = "sigchld"


@dataclass
class LaunchEntry:
    """The table's record of one launch, from its spawn until the table forgets it."""

    key: str
    spawned: Spawned
    policy: StopPolicy
    tree: Descendants | None  # process-group mode only: a cgroup knows its members
    exit: ExitStatus | None = None
    looks: int = 0  # last looks taken while a child was mid-exec
    stop_asked: bool = False  # a stop of it began while its leader ran
    _gone: asyncio.Future[None] | None = None   # made for the first that waits (gone())

    def ended(self, status: ExitStatus) -> None:
        """The leader's exit was taken up: everything waiting for it goes on."""
        self.exit = status
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)

    def gone(self) -> asyncio.Future[None] | None:
        """A future done once the leader's exit is taken up; None when it was. Await it
        through asyncio.wait, which never cancels it (others may wait on it too)."""
        if self.exit is not None:
            return None
        if self._gone is None:
            self._gone = asyncio.get_running_loop().create_future()
        return self._gone


class TableState:
    """The process table's state (set by owner.procs.ProcessTable.__init__, which says
    what each part is) and its lookups by launch key."""

    _loop: asyncio.AbstractEventLoop
    _on_exit: OnExit
    mode: ExitMode
    _spawner: Spawner
    _notify_path: str | None
    _reap_orphans: bool
    _live: dict[str, LaunchEntry]
    _by_pid: dict[int, str]
    _by_leader: dict[int, str]
    _exited: OrderedDict[str, LaunchEntry]
    _lingering: dict[str, LaunchEntry]
    cgroups: CgroupTree | None
    orphans_reaped: int
    tracked_revision: int
    _never_settled: set[tuple[int, int]]
    _looked_at: float
    _look_began: float
    _turn_unsettled: list[tuple[int, int]] | None
    _orphans_behind: bool
    _closed: bool

    def _find(self, key: str) -> LaunchEntry | None:
        return self._live.get(key) or self._lingering.get(key) or self._exited.get(key)

    def _entry(self, key: str) -> LaunchEntry:
        entry = self._find(key)
        if entry is None:
            raise NotFound(f"no launch {key!r} in the process table", {"launch_key": key})
        return entry
