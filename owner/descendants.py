"""Every process of a launch in process-group mode: its leader's descendants, tracked.

Why: a process group is not a container. A child may leave it (``setsid``, ``setpgid``),
and a stop that signals only the group misses it while reporting ``stopped``. Without a
delegated cgroup the owner therefore keeps, per launch, the set of processes it has seen
descend from the leader, each as ``(pid, start ticks)``, and stops and counts those too.

How a descendant is found:

- children of the leader and of every tracked process, from /proc/PID/task/*/children
  (:meth:`Descendants.refresh`, run on a timer, before every signal and at every poll of
  a stop);
- orphans: the owner is a child subreaper, so a process whose parent died is re-parented
  to it; an untracked child of the owner is attributed by the launch key in its
  environment, or by its process group or session (:func:`attribute_orphan`; one in
  the middle of an exec is asked again: :class:`MidExec`);
- members of the launch's group and session while the leader is unreaped (its zombie
  holds the number, so nobody else can have a group or session with that id) are
  signalled through the group id and counted by a group scan during a stop
  (:mod:`owner.targets`).

What is left: a descendant that forks, leaves the group and session, and loses its
parent between two refreshes, and that also cleared its environment, cannot be
attributed; it stays a child of the owner, which reaps it when it exits.

Signals to tracked processes go through :func:`kill_verified`: a pidfd is opened first
and the start ticks are checked after, so the signal reaches the process we tracked or
nobody (a pid reused within the same clock tick as the tracked start is the one case
ticks cannot tell apart).
"""

from __future__ import annotations

import logging
import signal as _signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from protocol.layout import LAUNCH_KEY_ENV, OWNER_HOME_ENV
from protocol.procfs import children, environ, kill_verified, read_stat, read_stat_strict

__all__ = ["LAUNCH_KEY_ENV", "OWNER_HOME_ENV", "Descendants", "MidExec",
           "attribute_orphan", "stop_in_rounds"]

log = logging.getLogger(__name__)

# LAUNCH_KEY_ENV names the launch an app's processes belong to; OWNER_HOME_ENV, beside
# it, the home of the owner that launched it. Launch keys repeat across homes
# (``stack/app/N/generation``), so a process is taken as a launch's only when both match:
# a reconcile of one home never touches another home's processes.

# A fork bomb must not make one refresh walk without end; what is left is found next time.
MAX_TRACKED = 65_536


STOP_ROUND_S = 0.02
"""How often :func:`stop_in_rounds` looks again for what is left (and for newcomers)."""


async def stop_in_rounds(listed: Callable[[], list[tuple[int, int]]], grace: float,
                         now: Callable[[], float],
                         sleep: Callable[[float], Awaitable[object]],
                         kill: Callable[[int, int, int], bool] = kill_verified) -> list[int]:
    """Stop every process ``listed()`` names as (pid, start ticks): SIGTERM, then SIGKILL
    to what is still listed ``grace`` s after the start, giving up ``grace`` s later.

    Why rounds: ``listed()`` is read again every STOP_ROUND_S until it is empty. When a
    stopped process dies its children are re-parented to the owner (a subreaper) and
    listed from then on: a list read once left them running under init. A newcomer gets
    the signal of the phase it arrives in. Each process is signalled through ``kill``
    (:func:`kill_verified`: the process that started at those ticks, or nobody), once per
    signal. Returns the pids that were signalled, in the order first signalled. Raises
    nothing but what ``listed``, ``now`` and ``sleep`` raise."""
    sent: dict[tuple[int, int], int] = {}   # (pid, ticks) -> the last signal it got
    kill_at = now() + grace
    while True:
        left = listed()
        t = now()
        if not left or t >= kill_at + grace:
            return [pid for pid, _ in sent]
        sig = _signal.SIGKILL if t >= kill_at else _signal.SIGTERM
        for proc in left:
            if sent.get(proc) != sig and kill(*proc, sig):
                sent[proc] = sig
        await sleep(STOP_ROUND_S)


def _nothing() -> None:
    pass


def _gone(pid: int, ticks: int) -> bool:
    """Whether tracked process (``pid``, ``ticks``) has ended: gone from /proc, its number
    now another process's, or a zombie. False when /proc could not say (out of
    descriptors, say): only proof ends the tracking of a process."""
    try:
        st = read_stat_strict(pid)
    except (OSError, ValueError, IndexError):
        return False
    return st is None or st.start_ticks != ticks or st.zombie


class Descendants:
    """The processes of one launch besides its leader (``pid``, which is also its process
    group and session id). Not thread-safe; used on the owner's loop."""

    def __init__(self, leader: int, on_change: Callable[[], None] | None = None) -> None:
        self.leader = leader
        self.known: dict[int, int] = {}  # pid -> start ticks
        # called whenever ``known`` changed (the table's revision of what it tracks)
        self._changed = on_change or _nothing
        # time.monotonic() a refresh last found a tracked process gone: a look for the
        # owner's orphans begun before it may have missed that process's children
        self.lost_at = float("-inf")

    def adopt(self, pid: int, ticks: int) -> None:
        """Track ``pid`` (an orphan attributed to this launch)."""
        if pid != self.leader and len(self.known) < MAX_TRACKED and \
                self.known.get(pid) != ticks:
            self.known[pid] = ticks
            self._changed()

    def refresh(self, leader_unreaped: bool) -> None:
        """Forget tracked processes that are gone; add the children of the leader (while
        it is unreaped) and of every tracked process. One whose /proc could not be read
        (the owner out of descriptors) is kept: a failed read is no proof of its end.
        Raises nothing."""
        for pid, ticks in list(self.known.items()):
            if _gone(pid, ticks):
                del self.known[pid]
                self.lost_at = time.monotonic()   # its children are the owner's now
                self._changed()
        roots = list(self.known)
        if leader_unreaped:
            roots.append(self.leader)
        self._walk(roots)

    def _walk(self, roots: list[int]) -> None:
        seen = set(roots)
        todo = list(roots)
        while todo and len(self.known) < MAX_TRACKED:
            parent = todo.pop()
            if parent != self.leader and parent not in self.known:
                st = read_stat(parent)
                if st is None or st.zombie:
                    continue
                self.known[parent] = st.start_ticks
                self._changed()
            for child in children(parent):
                if child not in seen:
                    seen.add(child)
                    todo.append(child)

    def holds(self, gid: int) -> bool:
        """Whether a tracked process still runs in group or session ``gid``."""
        for pid, ticks in self.known.items():
            st = read_stat(pid)
            if st is not None and st.start_ticks == ticks and not st.zombie and \
                    gid in (st.pgid, st.sid):
                return True
        return False

    def alive(self) -> list[int]:
        """Tracked processes that still run (zombies are gone: they hold nothing), and
        those whose /proc could not be read: a stop is not confirmed on a failed read."""
        return [pid for pid, ticks in self.known.items() if not _gone(pid, ticks)]

    def send(self, sig: int, *, skip_pgid: int | None) -> int:
        """Signal every tracked process (verified, see :func:`kill_verified`) except
        members of ``skip_pgid``. Returns how many were signalled."""
        return sum(kill_verified(pid, ticks, sig, skip_pgid=skip_pgid)
                   for pid, ticks in list(self.known.items()))


@dataclass(frozen=True)
class MidExec:
    """:func:`attribute_orphan`'s answer for a child in the middle of an exec: its
    environment reads empty and its group and session name no launch. Ask again in a
    moment (a ``sh -c 'setsid prog &'`` child is so right after its shell exits)."""

    start_ticks: int


def attribute_orphan(pid: int, group_owner: Callable[[int], str | None],
                     ) -> tuple[str, int] | MidExec | None:
    """The launch key an untracked child of the owner belongs to, with its start ticks.

    By ``TENURE_LAUNCH_KEY`` in its environment first (exact, unless the app cleared its
    environment), else by its process group or session: ``group_owner`` names the launch
    whose group or session has that id, when that is certain. :class:`MidExec` when it
    cannot be attributed while its environment reads empty; None when the process is
    gone or cannot be attributed. Raises nothing.
    """
    st = read_stat(pid)
    if st is None or st.zombie:
        return None
    env = environ(pid)
    prefix = LAUNCH_KEY_ENV.encode() + b"="
    for var in env or ():
        if var.startswith(prefix):
            return var[len(prefix):].decode("utf-8", "surrogateescape"), st.start_ticks
    for gid in (st.pgid, st.sid):
        key = group_owner(gid)
        if key is not None:
            return key, st.start_ticks
    return MidExec(st.start_ticks) if env == [] else None
