"""The file-descriptor store (systemd's ``FDSTORE=1``): fds an app keeps across restarts.

An app sends ``FDSTORE=1`` (and ``FDNAME=x``, default ``stored``) with descriptors attached
(SCM_RIGHTS) over ``NOTIFY_SOCKET``; the owner keeps them for that app instance
(``stack/app/instance``), at most ``fd_store_max`` of them (the launch's), and passes them
to the instance's next launch after its sockets, named in ``LISTEN_FDNAMES``. Stored fds
stay stored across any number of launches until the app sends ``FDSTOREREMOVE=1`` with
``FDNAME=x`` (every fd of that name goes), the backend clears the store (the app left the
config), or the owner stops. An fd that is an open file the store holds already is
closed and not stored again, as systemd removes duplicates. A message that would exceed
the limit keeps nothing of that message: its fds are closed and counted as refused. So
does one whose fds did not all arrive (the owner out of descriptors): owner.notify drops
it before it gets here.

Every fd in the store is the owner's own duplicate: close-on-exec, and never inherited by
anything but the launch it is passed to (owner.fdpass).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_FDNAME", "FdStore", "StoreKey", "StoredFd", "valid_fdname"]

log = logging.getLogger("tenure.owner")

StoreKey = tuple[str, str, int]  # stack, app, instance
DEFAULT_FDNAME = "stored"


def valid_fdname(name: str) -> bool:
    """What systemd accepts as FDNAME: 1-255 printable ASCII, no ':'."""
    return 1 <= len(name) <= 255 and name.isascii() and name.isprintable() and ":" not in name


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISSOCK, "socket"), (stat.S_ISFIFO, "pipe"),
                       (stat.S_ISREG, "file"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISCHR, "char-device"), (stat.S_ISBLK, "block-device")):
        if test(mode):
            return kind
    return "other"


@dataclass(frozen=True)
class StoredFd:
    name: str
    fd: int
    kind: str
    inode: int

    def to_wire(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "inode": self.inode}


class FdStore:
    """Stored fds per app instance. The owner's loop only; raises nothing."""

    def __init__(self) -> None:
        self._fds: dict[StoreKey, list[StoredFd]] = {}
        self.stats = dict.fromkeys(("stored", "refused", "removed"), 0)

    def add(self, key: StoreKey, name: str, fds: list[int], limit: int) -> bool:
        """Keep ``fds`` (the store takes ownership) under ``name``; all or nothing: over
        ``limit`` in total, or a bad name, closes them all and returns False. One that is
        an open file stored already (or earlier in ``fds``) is closed and not counted:
        an app that stores again what it was given kept one copy, not two."""
        have = self._fds.setdefault(key, [])
        given = len(fds)
        fds = self._new(have, fds)
        if not given or not valid_fdname(name) or len(have) + len(fds) > limit:
            _close(fds)
            self.stats["refused"] += len(fds)
            if not have:
                del self._fds[key]
            return False
        for fd in fds:
            try:
                st = os.fstat(fd)
            except OSError:
                self.stats["refused"] += 1
                continue
            have.append(StoredFd(name, fd, _kind(st.st_mode), st.st_ino))
            self.stats["stored"] += 1
        return True

    @staticmethod
    def _new(have: list[StoredFd], fds: list[int]) -> list[int]:
        """``fds`` without those that are an open file of ``have`` or of an earlier one
        of ``fds`` (closed)."""
        new: list[int] = []
        for fd in fds:
            if any(_same_open_file(fd, other) for other in (*(s.fd for s in have), *new)):
                _close([fd])
            else:
                new.append(fd)
        return new

    def count_refused(self, n: int) -> None:
        """Count ``n`` fds refused before they reached the store, already closed: those
        of an ``FDSTORE=1`` message that arrived cut short (owner.notify)."""
        self.stats["refused"] += n

    def remove(self, key: StoreKey, name: str) -> int:
        """Close every fd stored under ``name``; returns how many."""
        have = self._fds.get(key, [])
        gone = [s for s in have if s.name == name]
        self._replace(key, [s for s in have if s.name != name])
        _close([s.fd for s in gone])
        self.stats["removed"] += len(gone)
        return len(gone)

    def for_launch(self, key: StoreKey, limit: int) -> list[StoredFd]:
        """The fds to pass to a launch of ``key`` (oldest first). A store over ``limit``
        (the limit was lowered) is cut to it first: the newest go."""
        have = self._fds.get(key, [])
        if len(have) > limit:
            _close([s.fd for s in have[limit:]])
            self.stats["removed"] += len(have) - limit
            self._replace(key, have[:limit])
        return list(self._fds.get(key, []))

    def clear(self, key: StoreKey) -> int:
        """Close everything stored for ``key``; returns how many."""
        gone = self._fds.pop(key, [])
        _close([s.fd for s in gone])
        self.stats["removed"] += len(gone)
        return len(gone)

    def stored_keys(self) -> list[StoreKey]:
        return sorted(self._fds)

    def close_all(self) -> None:
        for key in list(self._fds):
            self.clear(key)

    def to_wire(self) -> list[dict[str, Any]]:
        return [{"stack": k[0], "app": k[1], "instance": k[2],
                 "fds": [s.to_wire() for s in v]} for k, v in sorted(self._fds.items())]

    def _replace(self, key: StoreKey, fds: list[StoredFd]) -> None:
        if fds:
            self._fds[key] = fds
        else:
            self._fds.pop(key, None)


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


_F_DUPFD_QUERY = 1027   # fcntl (Linux 6.10): 1 when two fds are one open file


def _same_open_file(a: int, b: int) -> bool:
    """Whether ``a`` and ``b`` are one open file, as systemd's same_fd() tells: the
    kernel's answer, or on a kernel without F_DUPFD_QUERY the same inode, not a device
    (two fds of one device may be different contexts of it), and the same status flags
    (the two ends of a pipe share an inode)."""
    try:
        return fcntl.fcntl(a, _F_DUPFD_QUERY, b) == 1
    except OSError as e:
        if e.errno != errno.EINVAL:
            return False
    try:
        sa, sb = os.fstat(a), os.fstat(b)
        if (sa.st_dev, sa.st_ino) != (sb.st_dev, sb.st_ino) or \
                stat.S_ISCHR(sa.st_mode) or stat.S_ISBLK(sa.st_mode):
            return False
        return fcntl.fcntl(a, fcntl.F_GETFL) == fcntl.fcntl(b, fcntl.F_GETFL)
    except OSError:
        return False
