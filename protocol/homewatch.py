"""Whether a daemon's home is still the directory it started in.

A daemon finds its state, its sockets and its peers by the home's path. When that
directory is deleted (or moved away, or replaced by a new one at the same path) while the
daemon runs, nothing can reach it any more, its state is gone, and a `tenure up` on the
path starts new daemons beside it: a second owner would launch every application again.
Two guards, each used by the daemons:

- :class:`HomeMark` remembers the directory (device and inode) the daemon started in, and
  :func:`watch` looks at the path every second; when it names another directory or
  nothing, the daemon ends with HOME_LOST without writing anything by path (the new
  directory there belongs to someone else).
- :func:`claim` holds a name in the abstract Unix socket namespace derived from the home's
  path for the daemon's lifetime. The lock file inside the home goes with a deleted home;
  this name does not, so a second owner on the same path is refused (ALREADY_RUNNING,
  naming the pid) while the first one still stops its applications.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .errors import AlreadyRunning, HomeLost
from .procholders import abstract_holder
from .sockets import peer_of

__all__ = ["WATCH_INTERVAL_S", "HomeMark", "claim", "claim_name", "end_if_lost", "watch"]

log = logging.getLogger("tenure.home")

WATCH_INTERVAL_S = 1.0


@dataclass(frozen=True)
class HomeMark:
    path: str
    dev: int
    ino: int

    @classmethod
    def take(cls, path: str | os.PathLike[str]) -> HomeMark:
        """The directory at ``path`` now. Raises OSError when there is none."""
        p = os.path.abspath(path)
        st = os.lstat(p)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", p)
        return cls(p, st.st_dev, st.st_ino)

    def lost(self) -> HomeLost | None:
        """None while the path still names the directory taken; else why not. A look that
        fails otherwise (EACCES, EIO) is not taken for a loss: raises that OSError."""
        try:
            st = os.lstat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return HomeLost(f"home {self.path} was deleted or moved away while this "
                            "daemon ran", {"home": self.path, "now": "missing"})
        if stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == (self.dev, self.ino):
            return None
        return HomeLost(f"home {self.path} was replaced by another "
                        f"{'directory' if stat.S_ISDIR(st.st_mode) else 'file'} while this "
                        "daemon ran", {"home": self.path, "now": "replaced"})


def end_if_lost(mark: HomeMark, on_lost: Callable[[HomeLost], None]) -> HomeLost | None:
    """One look: when ``mark``'s home is lost, log it (code HOME_LOST), call ``on_lost``
    and return the loss; else None. Raises OSError when the look itself fails."""
    loss = mark.lost()
    if loss is not None:
        log.error("%s", loss)
        on_lost(loss)
    return loss


async def watch(mark: HomeMark, on_lost: Callable[[HomeLost], None], *,
                interval: float = WATCH_INTERVAL_S,
                sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> HomeLost:
    """Look at ``mark``'s path every ``interval`` seconds; once it is lost, log it (code
    HOME_LOST), call ``on_lost`` and return the loss. A look that fails for another
    reason is logged once per kind of failure and the watch goes on."""
    failed: set[int] = set()
    while True:
        await sleep(interval)
        try:
            loss = end_if_lost(mark, on_lost)
        except OSError as exc:
            if (exc.errno or 0) not in failed:
                failed.add(exc.errno or 0)
                log.warning("cannot look at home %s (%s); still watching", mark.path,
                            exc.strerror)
            continue
        if loss is not None:
            return loss


def claim_name(kind: str, home: str | os.PathLike[str]) -> bytes:
    """The abstract socket name of ``kind`` (``owner``) for the home at this path."""
    digest = hashlib.sha256(os.fsencode(os.path.abspath(home))).hexdigest()[:40]
    return f"\0tenure-{kind}-{digest}".encode()


def claim(kind: str, home: str | os.PathLike[str]) -> socket.socket | None:
    """Hold ``kind``'s name for the home at this path until the returned socket closes
    (it is close-on-exec: applications do not inherit it).

    Raises AlreadyRunning (data: home, pid when known) when a process of ours (same user,
    or root) holds it: an earlier daemon whose home was deleted or replaced still runs.
    A name held by another user's process cannot be one of ours (anyone may bind any
    abstract name), and so is one held by a process it cannot find (a daemon of ours
    is always found): it is logged and None is returned; the lock file still guards."""
    name = claim_name(kind, home)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(name)
        sock.listen(8)   # never accepted: a refused daemon connects only to learn the pid
        return sock
    except OSError as exc:
        sock.close()
        if exc.errno != errno.EADDRINUSE:
            raise
    pid: int | None
    uid: int | None
    try:
        cred = peer_of(name, 1.0)
        pid, uid = cred.pid, cred.uid
    except ConnectionRefusedError:   # bound, not listening: not a claim of ours
        pid, uid = None, -1
    except OSError:   # no answer in time: its queue is full (anyone may fill it)
        pid, uid = abstract_holder(name) or (None, None)
    if uid is None:   # no answer and no holder in /proc: a daemon of ours holds its
        # claim in its fd table and we see our own (root sees all); this one does not
        # (anyone may fill the queue of a name it bound, then hand its fd away)
        log.warning("the %s name of home %s is held by a process tenure cannot identify "
                    "(nothing answers on it, /proc does not show it), not by tenure; "
                    "going on without it", kind, home)
        return None
    if uid not in (os.geteuid(), 0):
        log.warning("the %s name of home %s is held by another user's process (uid %d, "
                    "pid %s), not by tenure; going on without it", kind, home, uid, pid)
        return None
    where = os.path.abspath(home)
    raise AlreadyRunning(f"another {kind} started on {where} still runs (pid {pid}), "
                         "though its home directory was deleted or replaced; it stops its "
                         "applications and exits by itself: start again once it is gone",
                         {"home": where, "pid": pid, "home_lost": True})

