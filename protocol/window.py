"""What may not run beside an owner maintenance window (``tenure owner upgrade``) or a
``tenure down``: each holds ``execution/maintenance.lock`` while it runs
(backend.cli.windowlock). The guardian refuses its handoffs then, and the backend the
commands that start or stop applications, but for the window's own calls: a window
stops and starts them in its planned order, and a `start` beside it started an app on
the owner it was about to stop, before what it waits for (``after``)."""

from __future__ import annotations

from pathlib import Path

from .errors import OperationInProgress
from .procfs import flock_holder

__all__ = ["busy", "holder", "lock_path", "refuse_in_window"]


def lock_path(home: Path) -> str:
    return str(home / "execution" / "maintenance.lock")


def busy(pid: int | None, what: str) -> OperationInProgress:
    """The refusal of ``what`` while process ``pid`` (None: unknown) holds the lock."""
    who = f"pid {pid}" if pid else "its pid unknown"
    return OperationInProgress(f"an owner maintenance window (`tenure owner upgrade`) or a "
                               f"`tenure down` runs on this home ({who}): {what} waits "
                               "until it ends", {"pid": pid or None, "refused": what})


def holder(home: Path) -> int | None:
    """The pid of the living process that holds the lock, or None (root's lock in
    system scope: any holder counts, whoever may open the file)."""
    return flock_holder(lock_path(home), opened=False)


def refuse_in_window(home: Path, what: str) -> None:
    """Raises OperationInProgress while a living process holds the lock."""
    pid = holder(home)
    if pid is not None:
        raise busy(pid, what)
