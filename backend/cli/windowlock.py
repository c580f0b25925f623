"""``execution/maintenance.lock``: held by an owner maintenance window (``tenure owner
upgrade``, backend.cli.ownerwindow) and by ``tenure down`` while each runs, so neither
runs into the other. A `down` in the middle of a window stopped the owner the window
was starting (or one it had just started) and reported success, and the window then
started everything again; or it left the window unable to finish. The guardian refuses
its handoffs while a window holds the lock (guardian.service)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from protocol.layout import Layout
from protocol.procfs import flock_holder
from protocol.window import busy, lock_path, refuse_in_window

__all__ = ["held"]


@contextmanager
def held(layout: Layout, doing: str) -> Iterator[None]:
    """Hold the lock for ``doing`` (``tenure down``, ``tenure owner upgrade``). Raises
    OperationInProgress, naming the holder's pid, when another process holds it. A
    lock this user may not open (root's, in system scope) is only looked at: a living
    holder refuses, as the guardian's check does."""
    path = lock_path(layout.home)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:   # no execution/: nothing ever ran here, no window runs
        yield
        return
    except PermissionError:
        refuse_in_window(layout.home, doing)
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy(flock_holder(path), doing) from None
        yield
    finally:
        os.close(fd)
