"""``execution/maintenance.lock``: held by an owner maintenance window (``tenure owner
upgrade``, backend.cli.ownerwindow) and by ``tenure down`` while each runs, so neither
runs into the other. A `down` in the middle of a window stopped the owner the window
was starting (or one it had just started) and reported success, and the window then
started everything again; or it left the window unable to finish. The guardian refuses
its handoffs while a window holds the lock (guardian.service). The holder writes what it
does into the file (protocol.window.HOLDERS), so a refusal, or a wait that sees tenure
going away, can name it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from protocol.flocks import open_lock, take
from protocol.layout import Layout
from protocol.procholders import flock_holder
from protocol.window import HOLDERS, busy, lock_path, refuse_in_window, said

__all__ = ["held"]


@contextmanager
def held(layout: Layout, doing: str) -> Iterator[None]:
    """Hold the lock for ``doing`` (a protocol.window.HOLDERS key), written into it while
    it is held. Raises OperationInProgress, naming the holder and its pid, when another
    process holds it. A lock this user may not open (root's, in system scope) is only
    looked at: a living holder refuses, as the guardian's check does."""
    assert doing in HOLDERS, doing
    path = lock_path(layout.home)
    try:
        fd = open_lock(path)
    except FileNotFoundError:   # no execution/: nothing ever ran here, no window runs
        yield
        return
    except PermissionError:
        refuse_in_window(layout.home, doing)
        yield
        return
    try:
        if not take(fd):
            raise busy(flock_holder(path), doing, said(path))
        _write(fd, doing.encode())
        try:
            yield
        finally:
            _write(fd, b"")
    finally:
        os.close(fd)


def _write(fd: int, text: bytes) -> None:
    """The lock file's text: what its holder does (b"": none holds it). Best effort: a
    reader that finds nothing it knows names no one."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
    except OSError:
        pass
