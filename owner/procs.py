"""The owner's process table: launch, observe exits, signal, stop.

Every launch is tracked under its launch key from the moment :meth:`ProcessTable.launch`
returns until its exit is reported, exactly once, to ``on_exit``. Stops and signals name
the launch key, never a bare pid: a pid is reused by the kernel once its process is
reaped, and a later launch may hold it, so an old launch's key resolves to the old
launch's record (and its exit), never to whatever runs under that number now.

Exits are detected with a pidfd per process in the asyncio loop (``add_reader``), or —
where pidfds are unavailable, or when selected for tests — with SIGCHLD and
``waitpid(pid, WNOHANG)`` over the tracked pids.

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
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from protocol.errors import Conflict, LaunchFailed, NotFound
from protocol.procfs import main_thread_children
from protocol.sighandler import add_signal_handler

from .cgroups import CgroupTree, members, members_strict
from .descendants import Descendants, MidExec, attribute_orphan, stop_in_rounds
from .fdpass import PassFds
from .limits import apply_cgroup_limits, require_cgroup_limits
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
from .stop import POLL_INTERVAL_S, StopOutcome, StopResult, confirm_stop
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

log = logging.getLogger(__name__)

OnExit = Callable[[str, int, ExitStatus], None]  # launch key, leader pid, its exit

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
SHARED_SCAN_S = 0.002
"""Stops under way share one look for orphans ended this long ago: each stop looks
before every check of its group (every 20 ms) and every signal, and a look reads the
owner's whole list of children, so N stops at once cost O(N^2): a stack stop of 2,500
apps took 9 s, `down` of 5,000 ran past its minute, and the owner answered nothing
meanwhile. A look is shared only if it began after the stop's launch last lost a
tracked process (whose children it must see); the exits one turn of the event loop
sees share that turn's look (ProcessTable._turn_look), under the same condition."""
UNCLAIMED_GRACE_S = 5.0   # after SIGTERM, before SIGKILL (stop_unclaimed)
LAST_LOOKS = 50


class ExitMode(StrEnum):
    PIDFD = "pidfd"
    SIGCHLD = "sigchld"


@dataclass
class _Entry:
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


class ProcessTable:
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
        self._live: dict[str, _Entry] = {}
        self._by_pid: dict[int, str] = {}  # leader pid -> key, while unreaped only
        # leader pid -> key of the most recent launch it led, kept after the reap (see
        # _group_owner)
        self._by_leader: dict[int, str] = {}
        self._exited: OrderedDict[str, _Entry] = OrderedDict()
        # exited, with descendants seen running or a cgroup still populated
        self._lingering: dict[str, _Entry] = {}
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
        self._live[key] = _Entry(key, spawned, spec.stop, tree)
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

    def _target(self, entry: _Entry) -> GroupTarget | CgroupTarget:
        if entry.tree is None:
            assert self.cgroups is not None
            return CgroupTarget(entry, self.cgroups, lambda: self._closed)
        return GroupTarget(entry, self._adopt_orphans_shared)

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
    def _cgroup(entry: _Entry) -> Path:
        assert entry.spawned.cgroup is not None
        return Path(entry.spawned.cgroup)

    def _populated(self, entry: _Entry) -> bool:
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

    def _find(self, key: str) -> _Entry | None:
        return self._live.get(key) or self._lingering.get(key) or self._exited.get(key)

    def _entry(self, key: str) -> _Entry:
        entry = self._find(key)
        if entry is None:
            raise NotFound(f"no launch {key!r} in the process table", {"launch_key": key})
        return entry

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

    def _last_look(self, entry: _Entry, tree: Descendants, this_turn: bool = False
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

    def _look_again(self, entry: _Entry, unsettled: list[tuple[int, int]]) -> bool:
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

    def _finish(self, entry: _Entry, status: ExitStatus) -> None:
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
