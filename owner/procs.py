"""The owner's process table: launch, observe exits, signal, stop.

Every launch is tracked from the moment :meth:`ProcessTable.launch` returns until its exit
is reported, exactly once, to ``on_exit``. Exits are detected with a pidfd per process in
the asyncio loop (``add_reader``), or — where pidfds are unavailable, or when selected
for tests — with SIGCHLD and ``waitpid(pid, WNOHANG)`` over the tracked pids.

This module also re-exports the pieces split into sibling modules, so ``owner.procs`` is
the one import for process control.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal as _signal
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from protocol.errors import LaunchFailed, NotFound

from .cgroups import CgroupTree, members
from .limits import apply_cgroup_limits, require_cgroup_limits
from .procinfo import Inspector, group_members, inspect, read_pgid, read_start_ticks
from .reaper import become_subreaper, raise_nofile_limit, reap_orphans
from .spawn import PopenSpawner, Spawned, Spawner, pidfd_supported
from .specs import ExitStatus, LaunchSpec, StopPolicy
from .stop import StopOutcome, StopResult, confirm_stop

__all__ = [
    "ExitMode",
    "ExitStatus",
    "Inspector",
    "LaunchSpec",
    "PopenSpawner",
    "ProcessTable",
    "Spawned",
    "Spawner",
    "StopOutcome",
    "StopPolicy",
    "StopResult",
    "become_subreaper",
    "group_members",
    "inspect",
    "raise_nofile_limit",
    "read_pgid",
    "read_start_ticks",
    "reap_orphans",
]

log = logging.getLogger(__name__)

OnExit = Callable[[int, ExitStatus], None]

# Exited launches are remembered so a late stop/signal still finds the group; bounded so a
# long-lived owner does not grow without limit.
EXITED_MEMORY = 10_000

_LOST = ExitStatus(None, None)


class ExitMode(StrEnum):
    PIDFD = "pidfd"
    SIGCHLD = "sigchld"


@dataclass
class _Entry:
    spawned: Spawned
    policy: StopPolicy
    exit: ExitStatus | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)


class _GroupTarget:
    """A launch as seen by :func:`owner.stop.confirm_stop`."""

    def __init__(self, entry: _Entry) -> None:
        self._entry = entry

    def leader_exit(self) -> ExitStatus | None:
        return self._entry.exit

    def group_gone_for_good(self) -> bool:
        """The pgid now belongs to a stranger (so ours is certainly empty).

        Linux never reuses a pid number that is still some group's id, so while the
        leader is unreaped or any member lives, the pgid is ours. If, after the reap, a
        process with the leader's pid but other start ticks exists, the number was
        reused, which needs our group to have been empty: it can never refill (a group
        that empties ceases to exist), and signalling the pgid would hit the stranger.
        """
        sp = self._entry.spawned
        if self._entry.exit is None:
            return False
        ticks = read_start_ticks(sp.pgid)
        return ticks is not None and ticks != sp.start_ticks

    def group_alive(self) -> bool:
        if self.group_gone_for_good():
            return False
        return bool(group_members(self._entry.spawned.pgid))

    def send(self, sig: int) -> None:
        if self.group_gone_for_good():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._entry.spawned.pgid, sig)


class _CgroupTarget:
    """A launch in its own cgroup: membership is ``cgroup.procs``, exactly.

    The leader joins the cgroup through the shim right after Popen returns, so for a
    moment it may still be outside: until it is reaped it is counted and signalled on
    its own (through its pidfd). Nothing of the app can run outside the cgroup, because
    the shim execs the program only after joining.
    """

    def __init__(self, entry: _Entry, tree: CgroupTree, closed: Callable[[], bool]) -> None:
        self._entry = entry
        self._tree = tree
        self._closed = closed
        assert entry.spawned.cgroup is not None
        self.path = Path(entry.spawned.cgroup)

    def leader_exit(self) -> ExitStatus | None:
        return self._entry.exit

    def group_alive(self) -> bool:
        return self._entry.exit is None or bool(members(self.path))

    def send(self, sig: int) -> None:
        sp = self._entry.spawned
        pids = members(self.path)
        if self._entry.exit is None and sp.pid not in pids:
            # Still the shim, not yet in the cgroup: the pidfd cannot hit a stranger.
            with contextlib.suppress(ProcessLookupError, OSError):
                if sp.pidfd is not None and not self._closed():
                    _signal.pidfd_send_signal(sp.pidfd, sig)
                else:
                    os.kill(sp.pid, sig)
        if sig == _signal.SIGKILL and self._tree.kill(self.path):
            return  # one write kills every member, forks in flight included
        for pid in pids:
            # A member read from cgroup.procs that exits and whose number is reused
            # within this loop is the one race left (systemd's cg_kill has it too).
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)


class ProcessTable:
    """Launched processes of one owner. Construct inside the running event loop.

    ``mode`` picks exit detection (default: pidfd when the kernel has it). With
    ``reap_orphans=True`` (the owner, after :func:`become_subreaper`) every SIGCHLD also
    reaps re-parented grandchildren; leave it off in a process whose other children are
    waited for by someone else (a test runner).
    """

    def __init__(self, on_exit: OnExit, *, spawner: Spawner | None = None,
                 notify_socket_path: str | None = None, mode: ExitMode | None = None,
                 reap_orphans: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_exit = on_exit
        self.mode = mode or (ExitMode.PIDFD if pidfd_supported() else ExitMode.SIGCHLD)
        self._spawner = spawner or PopenSpawner(use_pidfd=self.mode is ExitMode.PIDFD)
        self._notify_path = notify_socket_path
        self._reap_orphans = reap_orphans
        self._live: dict[int, _Entry] = {}
        self._exited: OrderedDict[int, _Entry] = OrderedDict()
        self.cgroups: CgroupTree | None = None  # set once, before the first launch
        self.orphans_reaped = 0
        self._closed = False
        if self.mode is ExitMode.SIGCHLD or reap_orphans:
            self._loop.add_signal_handler(_signal.SIGCHLD, self._on_sigchld)

    def launch(self, spec: LaunchSpec, cgroup_key: str | None = None) -> Spawned:
        """Start ``spec`` and track it; the caller owns the returned pipe fds. In cgroup
        mode (``self.cgroups``) the launch gets the cgroup named after ``cgroup_key``,
        created before the spawn.

        Raises LaunchFailed or one of its kinds (PrivilegeRequired, LimitUnenforceable);
        nothing is left behind, no cgroup either. Invariant: the pid is tracked before
        this returns and before any SIGCHLD handler can run, so its exit is never lost.
        """
        if self._closed:
            raise RuntimeError("process table is closed")
        tree = self.cgroups if cgroup_key is not None else None
        require_cgroup_limits(spec.limits, None if tree is None else tree.controllers)
        if self.cgroups is not None and cgroup_key is not None:
            spawned = self._spawn_in_cgroup(self.cgroups, spec, cgroup_key)
        else:
            spawned = self._spawner.spawn(spec, self._notify_path)
        if self.mode is ExitMode.PIDFD and spawned.pidfd is None:
            # A spawner that opened no pidfd (a fake, or an older one): watch it anyway.
            spawned = dataclasses.replace(spawned, pidfd=os.pidfd_open(spawned.pid))
        entry = _Entry(spawned, spec.stop)
        self._exited.pop(spawned.pid, None)
        self._live[spawned.pid] = entry
        if self.mode is ExitMode.PIDFD and spawned.pidfd is not None:
            self._loop.add_reader(spawned.pidfd, self._try_reap, spawned.pid)
        return spawned

    def _spawn_in_cgroup(self, tree: CgroupTree, spec: LaunchSpec, key: str) -> Spawned:
        try:
            path = tree.create(key)
        except OSError as e:
            raise LaunchFailed(f"cannot create the cgroup for {key!r}: {e.strerror}",
                               {"argv0": spec.argv[0]}) from e
        try:
            apply_cgroup_limits(spec.limits, path)  # before any process of the app runs
            return self._spawner.spawn(spec, self._notify_path, cgroup=os.fspath(path))
        except BaseException:
            tree.remove(path)
            raise

    def cgroup_of(self, pid: int) -> Path | None:
        """The cgroup directory of launch ``pid`` (None in process-group mode).
        Raises NotFound."""
        cg = self._entry(pid).spawned.cgroup
        return None if cg is None else Path(cg)

    def is_tracked(self, pid: int) -> bool:
        """Whether ``pid`` is a launch not yet reaped."""
        return pid in self._live

    def pids(self) -> list[int]:
        """Pids of launches not yet reaped."""
        return list(self._live)

    def get(self, pid: int) -> Spawned:
        """The launch record for ``pid`` (live or remembered). Raises NotFound."""
        return self._entry(pid).spawned

    def exit_status(self, pid: int) -> ExitStatus | None:
        """The exit of ``pid`` once reaped, None while it runs. Raises NotFound."""
        return self._entry(pid).exit

    def signal(self, pid: int, sig: int, group: bool = True) -> None:
        """Send ``sig`` to the launch's process group (or only its leader).

        Raises NotFound for an unknown pid, or when nothing is left to receive it. The
        leader alone is signalled through its pidfd when there is one (immune to reuse).
        """
        entry = self._entry(pid)
        sp = entry.spawned
        try:
            if group and self.cgroups is not None and sp.cgroup is not None:
                target = _CgroupTarget(entry, self.cgroups, lambda: self._closed)
                if not target.group_alive():
                    raise ProcessLookupError
                target.send(sig)
            elif group:
                if _GroupTarget(entry).group_gone_for_good():
                    raise ProcessLookupError
                os.killpg(sp.pgid, sig)
            elif entry.exit is not None:
                raise ProcessLookupError
            elif sp.pidfd is not None and not self._closed:
                _signal.pidfd_send_signal(sp.pidfd, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            raise NotFound(f"process {pid} has nothing left to signal", {"pid": pid}) from None

    async def stop(self, pid: int, policy: StopPolicy | None = None) -> StopResult:
        """Confirmed stop of the launch ``pid`` and its group (see
        :func:`owner.stop.confirm_stop`); ``policy`` defaults to the launch's own.

        Raises NotFound for a pid this table never launched (or forgot).
        """
        entry = self._entry(pid)
        if self.cgroups is None or entry.spawned.cgroup is None:
            return await confirm_stop(_GroupTarget(entry), policy or entry.policy)
        target = _CgroupTarget(entry, self.cgroups, lambda: self._closed)
        result = await confirm_stop(target, policy or entry.policy)
        if result.outcome is not StopOutcome.TIMEOUT:
            # Confirmed empty: the cgroup has served its purpose.
            self.cgroups.remove(target.path)
        return result

    async def wait(self, pid: int) -> ExitStatus:
        """Wait for ``pid`` to be reaped. Raises NotFound."""
        entry = self._entry(pid)
        await entry.exited.wait()
        assert entry.exit is not None
        return entry.exit

    def reap_orphans(self) -> int:
        """Reap exited children that are not tracked launches (tracked ones go through
        the normal exit path). Returns how many orphans were reaped."""
        n = reap_orphans(self.is_tracked, self._try_reap)
        self.orphans_reaped += n
        return n

    def close(self) -> None:
        """Stop observing: remove readers and the SIGCHLD handler, close pidfds.

        Processes are NOT signalled: the owner stops them explicitly, or leaves them.
        """
        if self._closed:
            return
        self._closed = True
        if self.mode is ExitMode.SIGCHLD or self._reap_orphans:
            self._loop.remove_signal_handler(_signal.SIGCHLD)
        for entry in self._live.values():
            self._close_pidfd(entry.spawned)

    def _entry(self, pid: int) -> _Entry:
        entry = self._live.get(pid) or self._exited.get(pid)
        if entry is None:
            raise NotFound(f"no launch with pid {pid}", {"pid": pid})
        return entry

    def _on_sigchld(self) -> None:
        if self.mode is ExitMode.SIGCHLD:
            for pid in list(self._live):
                self._try_reap(pid)
        if self._reap_orphans:
            self.reap_orphans()

    def _try_reap(self, pid: int) -> None:
        entry = self._live.get(pid)
        if entry is None:
            return
        status = self._collect(entry.spawned)
        if status is not None:
            self._finish(pid, entry, status)

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

    def _finish(self, pid: int, entry: _Entry, status: ExitStatus) -> None:
        del self._live[pid]
        self._close_pidfd(entry.spawned)
        entry.exit = status
        entry.exited.set()
        if self.cgroups is not None and entry.spawned.cgroup is not None:
            # Gone only if nothing of the app outlived its leader; else stop removes it.
            self.cgroups.remove(Path(entry.spawned.cgroup))
        self._exited[pid] = entry
        while len(self._exited) > EXITED_MEMORY:
            self._exited.popitem(last=False)
        try:
            self._on_exit(pid, status)
        except Exception:
            log.exception("on_exit callback failed for %d", pid)

    def _close_pidfd(self, sp: Spawned) -> None:
        if sp.pidfd is None:
            return
        if self.mode is ExitMode.PIDFD:
            self._loop.remove_reader(sp.pidfd)
        with contextlib.suppress(OSError):
            os.close(sp.pidfd)
