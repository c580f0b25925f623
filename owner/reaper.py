"""Process-wide duties of the owner: child subreaper, orphan reaping, fd limit and
descriptor table."""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import resource
from collections.abc import Callable

__all__ = ["become_subreaper", "is_subreaper", "raise_nofile_limit", "reap_orphans",
           "reserve_fd_table"]

log = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
# Descriptor slots the owner's table gets at start: three per app (two pipes, a pidfd)
# and its sockets, for about 1,300 apps before the kernel has to grow it again.
FD_TABLE_RESERVE = 4096


def _prctl() -> Callable[..., int]:
    # The process's own symbols (libc is loaded): ctypes.util.find_library would run
    # `ldconfig -p` in a subprocess on every owner start.
    fn: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    return fn


def become_subreaper() -> None:
    """Make this process the reaper of orphaned descendants (PR_SET_CHILD_SUBREAPER).

    A grandchild whose parent exits is re-parented to us instead of to init, so it stays
    observable and is reaped by :func:`reap_orphans`. Affects the whole process, for
    good. Raises OSError if the kernel refuses.
    """
    if _prctl()(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


def is_subreaper() -> bool:
    """Whether this process is a child subreaper."""
    flag = ctypes.c_int(0)
    if _prctl()(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
        return False
    return flag.value != 0


def reap_orphans(is_tracked: Callable[[int], bool],
                 reap_tracked: Callable[[int], None]) -> int:
    """Reap every exited child that is not a tracked launch; return how many.

    Why peek first: a plain ``waitpid(-1, WNOHANG)`` would also consume the exit status
    of a tracked launch whose pidfd has not been read yet, and the table would lose it.
    ``waitid(P_ALL, WEXITED|WNOHANG|WNOWAIT)`` shows the next zombie without reaping it;
    untracked ones are then reaped by pid. The kernel always shows the same (first)
    zombie, so a tracked zombie would hide every orphan behind it: such a pid is handed
    to ``reap_tracked``, which must reap it through the table's own path (so its exit is
    still reported exactly once). A pid peeked twice ends the loop rather than spin.
    """
    reaped = 0
    seen: set[int] = set()
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return reaped
        if info is None or info.si_pid in seen:
            return reaped
        pid = info.si_pid
        seen.add(pid)
        if is_tracked(pid):
            reap_tracked(pid)
            continue
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG)
            reaped += 1
            log.debug("reaped orphan %d (code %d, status %d)", pid, info.si_code,
                      info.si_status)
        except ChildProcessError:
            pass  # someone else reaped it between the peek and now


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the new soft limit.

    The owner holds two pipes, a pidfd and sockets per app: 1024 runs out near 300 apps.
    An infinite hard limit is capped at fs.nr_open, the most the kernel accepts.
    Never raises: on refusal the old limit stays and is returned.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open", encoding="ascii") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1 << 20
    if target <= soft and soft != resource.RLIM_INFINITY:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as e:
        log.warning("cannot raise RLIMIT_NOFILE to %d: %s", target, e)
        return soft
    return target


def reserve_fd_table(limit: int, want: int = FD_TABLE_RESERVE) -> int:
    """Grow this process's descriptor table to ``min(want, limit)`` slots now; returns
    that number (0 when the kernel refused; never raises).

    The kernel doubles a table that a new descriptor does not fit, and in a process with
    more than one thread each growth first waits for an RCU grace period: 12-35 ms on
    this project's machines, spent by the event loop inside the launch whose pipe did not
    fit (with 256 slots at start, launches 77 and 162 of a fresh owner; a smaller table
    grows sooner and more often).
    A table never shrinks, so growing it once, before the journal's threads start, takes
    every such stall out. Its cost is kernel memory, 8 bytes a slot, none of it resident
    in the process. The descriptor that grows it is closed at once; none is clobbered
    (F_DUPFD takes the lowest free number from ``target - 1`` up).
    """
    target = want if limit < 0 else min(want, limit)   # < 0: RLIM_INFINITY
    try:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        log.warning("cannot reserve the descriptor table: %s", e)
        return 0
    try:
        os.close(fcntl.fcntl(null, fcntl.F_DUPFD_CLOEXEC, target - 1))
    except OSError as e:
        log.warning("cannot reserve %d descriptor slots: %s", target, e)
        return 0
    finally:
        os.close(null)
    return target
