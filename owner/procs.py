"""The owner's process table: launch, observe exits, signal, stop.

Every launch is tracked under its launch key from the moment :meth:`ProcessTable.launch`
returns until its exit is reported, exactly once, to ``on_exit``. Stops and signals name
the launch key, never a bare pid: a pid is reused by the kernel once its process is
reaped, and a later launch may hold it, so an old launch's key resolves to the old
launch's record (and its exit), never to whatever runs under that number now.

Exits are detected with a pidfd per process in the asyncio loop (``add_reader``), or —
where pidfds are unavailable, or when selected for tests — with SIGCHLD and
``waitpid(pid, WNOHANG)`` over the tracked pids.

The table is built in parts: its state (owner.procentry), the tracking of what outlives
a leader (owner.proctrack) and exit detection and reaping (owner.procexits); this module
adds launching, signals, stops and queries. It also re-exports the pieces split into
sibling modules, so ``owner.procs`` is the one import for process control.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal as _signal
from collections import OrderedDict
from pathlib import Path

from protocol.errors import Conflict, LaunchFailed, NotFound
from protocol.procfs import main_thread_children
from protocol.sighandler import add_signal_handler

from .cgroups import CgroupTree
from .descendants import Descendants, stop_in_rounds
from .fdpass import PassFds
from .limits import apply_cgroup_limits, require_cgroup_limits
from .procentry import ExitMode, LaunchEntry, OnExit
from .procexits import Reaping
from .procinfo import (
    Inspector,
    group_members,
    inspect,
    read_pgid,
    read_start_ticks,
    read_stat,
)
from .reaper import become_subreaper, raise_nofile_limit, reap_orphans
from .spawn import PopenSpawner, Spawned, Spawner, pidfd_supported
from .specs import ExitStatus, LaunchSpec, StopPolicy
from .stop import StopOutcome, StopResult, confirm_stop
from .targets import CgroupTarget, GroupTarget

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

UNCLAIMED_GRACE_S = 5.0   # after SIGTERM, before SIGKILL (stop_unclaimed)


class ProcessTable(Reaping):
    """Launched processes of one owner, by launch key. Construct inside the running loop.

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
        self._live: dict[str, LaunchEntry] = {}
        self._by_pid: dict[int, str] = {}  # leader pid -> key, while unreaped only
        # leader pid -> key of the most recent launch it led, kept after the reap (see
        # _group_owner)
        self._by_leader: dict[int, str] = {}
        self._exited: OrderedDict[str, LaunchEntry] = OrderedDict()
        # exited, with descendants seen running or a cgroup still populated
        self._lingering: dict[str, LaunchEntry] = {}
        self.cgroups: CgroupTree | None = None  # set once, before the first launch
        self.orphans_reaped = 0
        # moves whenever what descendants() returns may have changed: a caller that
        # compares it need not rebuild the map (O(launches)) at every exit
        self.tracked_revision = 0
        # children of the owner (pid, start ticks) still mid-exec after LAST_LOOKS: a
        # last look does not wait for them again
        self._never_settled: set[tuple[int, int]] = set()
        self._looked_at = float("-inf")   # time.monotonic() the last orphan look ended
        self._look_began = float("-inf")  # and began
        self._turn_unsettled: list[tuple[int, int]] | None = None   # this turn's look
        self._orphans_behind = False   # orphans may wait behind a zombie left to its pidfd
        self._closed = False
        if self.mode is ExitMode.SIGCHLD or reap_orphans:
            add_signal_handler(self._loop, _signal.SIGCHLD, self._on_sigchld)

    def launch(self, spec: LaunchSpec, key: str, passed: PassFds | None = None) -> Spawned:
        """Start ``spec`` as launch ``key`` and track it, passing ``passed`` as its fds
        3.. (the caller keeps its own ends); the caller owns the returned pipe fds. In
        cgroup mode (``self.cgroups``) the launch gets the cgroup named after ``key``,
        created before the spawn.

        Raises Conflict for a key the table already holds, LaunchFailed or one of its
        kinds (PrivilegeRequired, LimitUnenforceable); nothing is left behind, no cgroup
        either. Invariant: the pid is tracked before this returns and before any SIGCHLD
        handler can run, so its exit is never lost.
        """
        if self._closed:
            raise RuntimeError("process table is closed")
        if key in self._live or key in self._exited:
            raise Conflict(f"launch key {key!r} is already in the process table",
                           {"launch_key": key})
        require_cgroup_limits(spec.limits, None if self.cgroups is None
                              else self.cgroups.controllers)
        if self.cgroups is not None:
            spawned = self._spawn_in_cgroup(self.cgroups, spec, key, passed)
        else:
            spawned = self._spawner.spawn(spec, self._notify_path, passed=passed)
        if self.mode is ExitMode.PIDFD and spawned.pidfd is None:
            # A spawner that opened no pidfd (a fake, or an older one): watch it anyway.
            spawned = dataclasses.replace(spawned, pidfd=os.pidfd_open(spawned.pid))
        tree = Descendants(spawned.pid, self._tracked_changed) if spawned.cgroup is None \
            else None
        self._live[key] = LaunchEntry(key, spawned, spec.stop, tree)
        self._by_pid[spawned.pid] = key
        self._by_leader[spawned.pid] = key
        if self.mode is ExitMode.PIDFD and spawned.pidfd is not None:
            self._loop.add_reader(spawned.pidfd, self._exit_seen, spawned.pid)
        return spawned

    def _spawn_in_cgroup(self, tree: CgroupTree, spec: LaunchSpec, key: str,
                         passed: PassFds | None) -> Spawned:
        try:
            path = tree.create(key)
        except OSError as e:
            raise LaunchFailed(f"cannot create the cgroup for {key!r}: {e.strerror}",
                               {"argv0": spec.argv[0]}) from e
        try:
            apply_cgroup_limits(spec.limits, path)  # before any process of the app runs
            return self._spawner.spawn(spec, self._notify_path, cgroup=os.fspath(path),
                                       passed=passed)
        except BaseException:
            tree.remove(path)
            raise

    def cgroup_of(self, key: str) -> Path | None:
        """The cgroup directory of launch ``key`` (None in process-group mode).
        Raises NotFound."""
        cg = self._entry(key).spawned.cgroup
        return None if cg is None else Path(cg)

    def membership(self, key: str) -> tuple[Path | None, tuple[tuple[int, int], ...]]:
        """(cgroup directory, None in process-group mode; (pid, start ticks) of the
        leader and of every tracked descendant). Raises NotFound."""
        entry = self._entry(key)
        sp = entry.spawned
        known = () if entry.tree is None else tuple(entry.tree.known.items())
        return (None if sp.cgroup is None else Path(sp.cgroup),
                ((sp.pid, sp.start_ticks), *known))

    def is_tracked(self, key: str) -> bool:
        """Whether launch ``key`` is not yet reaped."""
        return key in self._live

    def live_keys(self) -> list[str]:
        """Keys of launches not yet reaped."""
        return list(self._live)

    def pids(self) -> list[int]:
        """Leader pids of launches not yet reaped."""
        return list(self._by_pid)

    def get(self, key: str) -> Spawned:
        """The launch record of ``key`` (live or remembered). Raises NotFound."""
        return self._entry(key).spawned

    def exit_status(self, key: str) -> ExitStatus | None:
        """The exit of launch ``key`` once reaped, None while it runs. Raises NotFound."""
        return self._entry(key).exit

    def signal(self, key: str, sig: int, group: bool = True) -> None:
        """Send ``sig`` to every process of launch ``key`` (its group or cgroup and its
        tracked descendants, see :mod:`owner.targets`), or only to its leader.

        Raises NotFound for an unknown key, or when nothing of that launch is left to
        receive it. The leader alone is signalled only while it is unreaped (so its pid
        cannot have been reused), through its pidfd when there is one.
        """
        entry = self._entry(key)
        sp = entry.spawned
        try:
            if group:
                target = self._target(entry)
                if not target.group_alive():
                    raise ProcessLookupError
                target.send(sig)
            elif entry.exit is not None:
                raise ProcessLookupError
            elif sp.pidfd is not None and not self._closed:
                _signal.pidfd_send_signal(sp.pidfd, sig)
            else:
                os.kill(sp.pid, sig)
        except ProcessLookupError:
            raise NotFound(f"launch {key!r} has nothing left to signal",
                           {"launch_key": key, "pid": sp.pid}) from None

    async def stop(self, key: str, policy: StopPolicy | None = None) -> StopResult:
        """Confirmed stop of launch ``key``: its leader, its group or cgroup and every
        tracked descendant (see :func:`owner.stop.confirm_stop`); ``policy`` defaults to
        the launch's own. ``stopped`` means all of them are gone.

        Raises NotFound for a key this table never launched (or forgot).
        """
        entry = self._entry(key)
        entry.stop_asked = entry.stop_asked or entry.exit is None
        target = self._target(entry)
        result = await confirm_stop(target, policy or entry.policy,
                                    leader_gone=entry.gone)
        if isinstance(target, CgroupTarget) and self.cgroups is not None and \
                result.outcome is not StopOutcome.TIMEOUT:
            # Confirmed empty: the cgroup has served its purpose.
            self.cgroups.remove(target.path)
        if entry.exit is not None and result.outcome is not StopOutcome.TIMEOUT \
                and self._lingering.pop(key, None) is not None:
            self._tracked_changed()
        return result

    def stop_asked(self, key: str) -> bool:
        """Whether a stop of launch ``key`` began while its leader still ran."""
        entry = self._live.get(key) or self._exited.get(key)
        return entry is not None and entry.stop_asked

    def _target(self, entry: LaunchEntry) -> GroupTarget | CgroupTarget:
        if entry.tree is None:
            assert self.cgroups is not None
            return CgroupTarget(entry, self.cgroups, lambda: self._closed)
        return GroupTarget(entry, self._adopt_orphans_shared)

    def policies(self) -> dict[str, float]:
        """How long the stop of each launch that may still run can take by its own
        policy (its timeout, then ``kill_after`` after SIGKILL), by key."""
        return {k: e.policy.timeout + e.policy.kill_after
                for k, e in [*self._live.items(), *self._lingering.items()]}

    async def stop_unclaimed(self, grace: float = UNCLAIMED_GRACE_S) -> list[int]:
        """At shutdown, once every launch was stopped: stop the children of this process
        that no launch accounts for. Only an app's processes become the owner's children
        (it spawns nothing else); these left their launch's group and session and
        cleared its environment, so nothing ties them to one (docs/owner.md), and they
        would run on under init with the app's pipes open. SIGTERM, then SIGKILL after
        ``grace`` s, and ``grace`` s more to see them reaped; the owner's children are
        read again every round, so the children of one that died, re-parented to this
        process, are stopped too (:func:`owner.descendants.stop_in_rounds`). Returns the
        pids that were signalled."""
        self.adopt_orphans()
        return await stop_in_rounds(self._unclaimed, grace, self._loop.time, asyncio.sleep)

    def unclaimed(self) -> list[int]:
        """Children of this process that no launch accounts for and that still run,
        after reaping what ended."""
        return [pid for pid, _ in self._unclaimed()]

    def _unclaimed(self) -> list[tuple[int, int]]:
        self.reap_orphans()
        claimed = {*self._by_pid, *(pid for pid, _ in self.descendants())}
        found = []
        for pid in main_thread_children(os.getpid()):
            st = None if pid in claimed else read_stat(pid)
            if st is not None and not st.zombie:
                found.append((pid, st.start_ticks))
        return found

    async def wait(self, key: str) -> ExitStatus:
        """Wait for launch ``key`` to be reaped. Raises NotFound."""
        entry = self._entry(key)
        gone = entry.gone()
        if gone is not None:
            await asyncio.wait((gone,))
        assert entry.exit is not None
        return entry.exit

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
