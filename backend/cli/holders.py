"""Which process of ours holds a daemon's socket or lock, learnt from the kernel
(SO_PEERCRED, /proc/locks) and /proc, not from an answer: what `tenure` names when a
daemon runs but does not answer, and what `tenure down` stops when it cannot ask."""

from __future__ import annotations

import os

from protocol.errors import ConnectFailed
from protocol.procfs import (
    read_cmdline,
    read_stat,
    signal_pending,
    silence,
    start_ticks,
    status_uid,
)
from protocol.procholders import flock_holder

__all__ = ["listener", "lock_holder", "runs_module", "silent_holder", "silent_listener",
           "term_waiting"]

SIGTERM = 15


def silent_listener(sock: str, module: str, then: str = "") -> ConnectFailed | None:
    """When daemon ``module`` of ours accepts on ``sock`` (it is running) but did not
    answer: the error that names its pid, what /proc shows of it, and ``then``."""
    found = listener(sock, module)
    if found is None:
        return None
    pid = found[0]
    said, pending = _silence(pid, module)
    return ConnectFailed(f"the {module} (pid {pid}) accepts on {sock} but does not "
                         f"answer: {said}" + (f". {then}" if then else ""),
                         {"pid": pid, "listening": True, **pending})


def silent_holder(sock: str, module: str, then: str = "") -> ConnectFailed | None:
    """When daemon ``module`` of ours holds its lock (``module``.lock beside ``sock``)
    but nothing listens on ``sock`` (it hangs before it listens, say): the error that
    names its pid, what /proc shows of it, and ``then``."""
    found = lock_holder(sock, module)
    if found is None:
        return None
    pid, lock = found[0], _lock_beside(sock, module)
    said, pending = _silence(pid, module)
    return ConnectFailed(f"the {module} (pid {pid}) holds {lock} but does not answer "
                         f"(nothing listens on {sock}): {said}" +
                         (f". {then}" if then else ""),
                         {"pid": pid, "path": sock, "listening": False, "lock": lock,
                          **pending})


def term_waiting(pid: int, module: str = "owner") -> str:
    """What continuing daemon ``module``, pid ``pid``, does when it is stopped with a
    SIGTERM waiting in it (`tenure down`'s): it takes the signal and shuts down, which
    for the owner stops every application. Said so wherever a stopped daemon is named:
    `kill -CONT` alone reads as harmless."""
    then = ", stopping every application" if module == "owner" else ""
    return (f"pid {pid} is stopped (SIGSTOP or a debugger) with a SIGTERM waiting (from a "
            f"`tenure down`, say): once continued (kill -CONT {pid}) it shuts down{then}; "
            "then `tenure up` starts tenure again")


def _silence(pid: int, module: str) -> tuple[str, dict[str, bool]]:
    """What /proc shows of daemon ``module``, pid ``pid``, that did not answer
    (procfs.silence), but :func:`term_waiting` when it is stopped with a SIGTERM
    waiting; and ``{"term_pending": True}`` then, for the error's data."""
    st = read_stat(pid)
    if st is not None and st.stopped and signal_pending(pid, SIGTERM):
        return term_waiting(pid, module), {"term_pending": True}
    return silence(pid), {}


def listener(sock: str, module: str) -> tuple[int, int | None] | None:
    """(pid, start ticks) of the process that accepts on ``sock`` when it is ``python
    -m module`` of this uid (or root's), learnt from the kernel (SO_PEERCRED), not from
    an answer; None when nothing listens there."""
    from protocol.sockets import peer_of
    try:
        cred = peer_of(sock, 2.0)
    except OSError:
        return None
    return _ours(cred.pid, cred.uid, module)


def lock_holder(sock: str, module: str) -> tuple[int, int | None] | None:
    """(pid, start ticks) of the process that holds the flock on daemon ``module``'s
    lock (``module``.lock beside its socket ``sock``) when it is that daemon, of this
    uid or root's, learnt from the kernel (/proc/locks): a daemon that takes its lock
    first and hangs before it listens is found so. None when nothing of ours holds it."""
    pid = flock_holder(_lock_beside(sock, module))
    uid = None if pid is None else status_uid(pid)
    return None if pid is None or uid is None else _ours(pid, uid, module)


def _lock_beside(sock: str, module: str) -> str:
    """Daemon ``module``'s lock file: beside its socket (runtime/guardian.lock,
    execution/owner.lock)."""
    return os.path.join(os.path.dirname(sock), f"{module}.lock")


def _ours(pid: int, uid: int, module: str) -> tuple[int, int | None] | None:
    """(pid, start ticks) when ``pid`` (of ``uid``) is daemon ``module`` of this uid or
    root's, else None."""
    ticks = start_ticks(pid)
    argv = read_cmdline(pid) or []
    if uid not in (os.geteuid(), 0) or not runs_module(argv, module):
        return None
    return pid, ticks


def runs_module(argv: list[str], module: str) -> bool:
    """Whether ``argv`` is ``python -m module …``, or the same module run from a release
    (guardian.release.command: ``python -I -S -B -c '…run_module('module'…' …``). Not
    a command that only names the module among its arguments (``tenure owner
    reconcile``: ``python -m backend.cli.main … owner reconcile``, which holds the
    owner's lock too)."""
    at = argv.index("-m") + 1 if "-m" in argv else len(argv)
    return (at < len(argv) and argv[at] == module) or \
        ("-c" in argv and any(f"runpy.run_module({module!r}" in a for a in argv))
