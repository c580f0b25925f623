"""Who holds a socket or a lock, from /proc: the socket inodes a process has open, the
holder of an abstract unix listener (found without connecting: one whose queue is full
does not answer), and the holder of an flock on a daemon's lock file. Each reads every
process's fd table or /proc/locks: for rare paths (a daemon that does not answer, a
lock that is not free), never a steady one. None of them raises."""

from __future__ import annotations

import os
from collections.abc import Iterable

from .flocks import free
from .procfs import PROC, READ_MAX, proc_pids, read_bounded, read_stat, status_uid

__all__ = ["abstract_holder", "flock_holder", "parse_locks", "parse_unix_listeners",
           "socket_inodes"]


def socket_inodes(pids: Iterable[int]) -> set[int]:
    """Socket inodes held open by ``pids`` (``/proc/PID/fd/N -> socket:[INODE]``).
    Processes that vanish or cannot be read are skipped."""
    found: set[int] = set()
    for pid in pids:
        base = f"{PROC}/{pid}/fd"
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            try:
                link = os.readlink(f"{base}/{name}")
            except OSError:
                continue
            if link.startswith("socket:[") and link.endswith("]"):
                found.add(int(link[8:-1]))
    return found


def parse_unix_listeners(data: bytes, name: bytes) -> list[int]:
    """Inodes of the listening sockets bound to the abstract ``name`` (it starts with
    NUL), from the bytes of /proc/net/unix (``Num RefCount Protocol Flags Type St Inode
    Path``; an abstract path shows as ``@…``; flag 0x10000 is a listener)."""
    want = "@" + name[1:].decode("ascii", "replace")
    out = []
    for line in data.decode("ascii", "replace").splitlines()[1:]:
        fields = line.split()
        if len(fields) == 8 and fields[7] == want:
            try:
                if int(fields[3], 16) & 0x10000:
                    out.append(int(fields[6]))
            except ValueError:
                continue
    return out


def abstract_holder(name: bytes) -> tuple[int, int] | None:
    """``(pid, uid)`` of a process that holds the listening socket bound to the abstract
    ``name``, found without connecting to it (a listener whose queue is full does not
    answer): /proc/net/unix gives the socket's inode, each process's fds the holder.
    None when none is found or /proc cannot say. Reads every process's fd table: only
    for a rare path."""
    data = read_bounded(f"{PROC}/net/unix", 1 << 24)
    inodes = set(parse_unix_listeners(data, name)) if data else set()
    if not inodes:
        return None
    for pid in proc_pids():
        if socket_inodes([int(pid)]) & inodes:
            uid = status_uid(int(pid))
            if uid is not None:
                return int(pid), uid
    return None


def parse_locks(data: bytes, ino: int) -> list[int]:
    """Pids that hold an flock(2) on a file with inode number ``ino``, from the bytes of
    /proc/locks (``1: FLOCK  ADVISORY  WRITE 4711 08:01:1234 0 EOF``). The device
    there is the superblock's, which on btrfs subvolumes and overlay mounts is not the
    st_dev stat gives, so it is not compared: see ``flock_holder``. Waiters (``->``)
    and malformed lines are skipped."""
    pids = []
    for line in data.decode("ascii", "replace").splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[5].rpartition(":")[2] != \
                str(ino):
            continue
        try:
            pids.append(int(fields[4]))
        except ValueError:
            continue
    return pids


def _has_open(pid: int, dev: int, ino: int) -> bool:
    """True when process ``pid`` has the file (``dev``, ``ino``) open."""
    fds = f"{PROC}/{pid}/fd"
    try:
        names = os.listdir(fds)
    except OSError:
        return False
    for name in names:
        try:
            st = os.stat(f"{fds}/{name}")
        except OSError:
            continue
        if st.st_ino == ino and st.st_dev == dev:
            return True
    return False


def flock_holder(path: str, *, opened: bool = True) -> int | None:
    """The pid of a living process that holds an flock on ``path`` (a daemon's lock
    file), or None: none holds it, the file is gone or /proc cannot say. The kernel
    records the pid that took the lock (an exec keeps it); /proc/locks names the file
    by inode number, and a holder counts only when it has that very file open.
    ``opened=False``: any living holder of a lock on that inode counts, for a caller
    that may not read another user's descriptors and must not take a lock it cannot
    see into for none. /proc/locks is read only for a lock that protocol.flocks.free
    does not find free."""
    if free(path):   # asked without /proc/locks, whose read may wait ~10 ms
        return None
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    data = read_bounded(f"{PROC}/locks", READ_MAX)
    if data is None:
        return None
    for pid in parse_locks(data, st.st_ino):
        stat = read_stat(pid)
        if stat is not None and not stat.zombie and \
                (not opened or _has_open(pid, st.st_dev, st.st_ino)):
            return pid
    return None
