"""What may not run beside an owner maintenance window (``tenure owner upgrade``) or a
``tenure down``: each holds ``execution/maintenance.lock`` while it runs
(backend.cli.windowlock). The guardian refuses its handoffs then, and the backend the
commands that start or stop applications, but for the window's own calls: a window
stops and starts them in its planned order, and a `start` beside it started an app on
the owner it was about to stop, before what it waits for (``after``).

The holder writes what it does into the lock file (one of :data:`HOLDERS`' keys) and
empties it before it lets go; a reader takes only those words, else it names no one."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import OperationInProgress
from .procholders import flock_holder

__all__ = ["DOWN", "HOLDERS", "busy", "down_running", "holder", "holding", "lock_path",
           "refuse_in_window"]

DOWN = "`tenure down`"
# what a holder writes into the lock -> how a refusal names it
HOLDERS = {
    DOWN: "a `tenure down`",
    "`tenure owner upgrade`": "an owner maintenance window (`tenure owner upgrade`)",
    "moving the owner to the first release":
        "`tenure up`, moving the owner to the first release",
}


def lock_path(home: Path) -> str:
    return str(home / "execution" / "maintenance.lock")


def busy(pid: int | None, what: str, doing: str | None = None) -> OperationInProgress:
    """The refusal of ``what`` while process ``pid`` (None: unknown) holds the lock for
    ``doing`` (a :data:`HOLDERS` key; None: not known)."""
    who = f"pid {pid}" if pid else "its pid unknown"
    holds = HOLDERS.get(doing or "", "an owner maintenance window (`tenure owner "
                                     "upgrade`) or a `tenure down`")
    return OperationInProgress(f"{holds} runs on this home ({who}): {what} is refused, "
                               "nothing was done; run it again once that has ended",
                               {"pid": pid or None, "refused": what,
                                "holder": doing if doing in HOLDERS else None})


def holder(home: Path) -> int | None:
    """The pid of the living process that holds the lock, or None (root's lock in
    system scope: any holder counts, whoever may open the file)."""
    return flock_holder(lock_path(home), opened=False)


def holding(home: Path) -> tuple[int, str | None] | None:
    """``(pid, doing)`` of the living process that holds the lock (``doing``: what it
    wrote there, a :data:`HOLDERS` key, or None), or None when none holds it."""
    pid = holder(home)
    return None if pid is None else (pid, said(lock_path(home)))


def down_running(home: Path) -> int | None:
    """The pid of a `tenure down` under way (it holds the lock and says so), else None.

    What the lock says is read first: only a lock that says :data:`DOWN` is looked up in
    /proc/locks. The first read of /proc/locks in a process waits for the kernel (an RCU
    grace period: ~10 ms on a two-CPU machine, measured), and every `tenure up` asks
    this. A holder that has not written yet is not a `down` under way either way."""
    if said(lock_path(home)) != DOWN:
        return None
    held = holding(home)
    return held[0] if held is not None and held[1] == DOWN else None


def said(path: str) -> str | None:
    """The :data:`HOLDERS` key written in the lock file at ``path``, or None: nothing
    there, anything else, or a file that is not ours to read (a symlink is not
    followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = os.read(fd, 256)
    except OSError:
        return None
    finally:
        os.close(fd)
    doing = text.decode("ascii", "replace")
    return doing if doing in HOLDERS else None


def refuse_in_window(home: Path, what: str) -> None:
    """Raises OperationInProgress while a living process holds the lock."""
    held = holding(home)
    if held is not None:
        raise busy(held[0], what, held[1])
