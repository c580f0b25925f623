"""The flock(2) locks that say a daemon or a window runs (execution/owner.lock,
runtime/guardian.lock, execution/maintenance.lock): whether one is held, asked without
reading /proc/locks, and how a holder takes one so that such a question never refuses
it.

Who holds a lock is learnt from /proc/locks (protocol.procholders.flock_holder), but
reading that file makes the kernel wait for an RCU grace period whenever nobody has
read it for a while: 7-22 ms here, asleep. Most questions find the lock free, so
:func:`free` asks first by taking a shared lock for a moment (two system calls): when
that succeeds nobody held it, and /proc/locks is read only for a lock that is held,
to name its holder.

For that moment the lock is the asker's: a holder whose exclusive try came then would
be refused. Every holder of these locks therefore takes them with :func:`take`, which
tries again for :data:`PATIENCE` before it gives up; a lock still held after that is
held by someone else.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time

__all__ = ["PATIENCE", "free", "hold", "open_lock", "take"]

PATIENCE = 0.2
"""Seconds a holder keeps trying a lock that an asker may hold for a moment."""
_STEP = 0.002


def free(path: str) -> bool | None:
    """True when no process holds an flock on the file at ``path`` (or there is none),
    False when one does; None when this cannot tell (a file it may not open, a symlink,
    not a regular file): ask /proc/locks then. A symlink is not followed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return None
    else:
        return True   # closing the descriptor lets the shared lock go
    finally:
        os.close(fd)


def take(fd: int, patience: float = PATIENCE) -> bool:
    """Take an exclusive flock on ``fd`` without waiting on a holder: True once taken,
    False when another process still holds it after ``patience`` seconds (what
    :func:`free` holds is let go within two system calls)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
        time.sleep(_STEP)


def open_lock(path: str) -> int:
    """The lock file at ``path`` opened to be locked: created 0600, never through a
    symlink, not inherited by children. On a file system gone read-only (a failing disk
    remounted so), an existing one is opened read-only, which flock(2) takes as well:
    `tenure down` and `tenure owner reconcile` refused to run at all there, with every
    application still running. Raises OSError (FileNotFoundError: none there, and none
    can be made)."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno != errno.EROFS:
            raise
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)


def hold(path: str) -> int | None:
    """Open the lock file at ``path`` (:func:`open_lock`) and :func:`take` it: its
    descriptor, which holds the lock until closed, or None when another process holds
    it. Raises OSError (the open)."""
    fd = open_lock(path)
    if take(fd):
        return fd
    os.close(fd)
    return None
