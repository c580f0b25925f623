"""The files of a release tree, handled without trusting them: opened without following
a symlink, hashed, scanned for what is there, identified by their status (so a tree
hashed before is not hashed again while none of its files changed), made read-only and
durable, removed. Nothing here knows what a release lists: guardian.release checks a
tree against its RUNTIME.json with these.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from protocol.errors import NotFound, UnsafePath

__all__ = ["CHUNK", "RO_DIR", "RO_FILE", "fsync_dir", "identity", "identity_digest",
           "identity_line", "make_durable", "make_readonly", "open_regular", "open_stat",
           "remove_tree", "scan", "sha256_file", "sha256_stat"]

RO_FILE = 0o444
RO_DIR = 0o555


def open_regular(path: Path | str, rel: str) -> int:
    """Open a regular file without following a symlink; return the fd.

    Raises UnsafePath for a symlink or a non-regular file, NotFound if it is missing.
    """
    return open_stat(path, rel)[0]


def open_stat(path: Path | str, rel: str) -> tuple[int, os.stat_result]:
    """:func:`open_regular`, with the file's status as opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as e:
        raise NotFound(f"{rel}: missing", {"file": rel}) from e
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePath(f"{rel}: is a symlink", {"file": rel}) from e
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePath(f"{rel}: not a regular file", {"file": rel})
    return fd, st


CHUNK = 1 << 16
"""Bytes per read when hashing or copying a release: below glibc's mmap threshold, so
the reads of a verification reuse one small block instead of leaving 1 MiB allocations
resident in the malloc arena of the thread that verified (1.3 MiB of the guardian's
RSS)."""


def sha256_file(path: Path | str, rel: str | None = None) -> str:
    """sha256 hex of a regular file, never following a symlink.

    Plain descriptor reads, no file object: a release is ~1,200 small files hashed at
    every daemon start, and the buffered-file path was twice the time of the hashing.
    Raises UnsafePath (symlink, special file), NotFound (missing), OSError (I/O).
    """
    return sha256_stat(path, rel or str(path))[0]


def sha256_stat(path: Path | str, rel: str) -> tuple[str, os.stat_result]:
    """:func:`sha256_file`, with the file's status taken before its content was read."""
    fd, st = open_stat(path, rel)
    try:
        digest = hashlib.sha256()
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
        return digest.hexdigest(), st
    finally:
        os.close(fd)


def scan(root: Path) -> tuple[set[str], set[str]]:
    """(files, dirs) under ``root`` as relative POSIX paths; root itself is not listed.

    Raises UnsafePath naming the first symlink or special file met.
    """
    files: set[str] = set()
    dirs: set[str] = set()
    stack = [(root, "")]
    while stack:
        here, prefix = stack.pop()
        with os.scandir(here) as it:
            for entry in it:
                rel = prefix + entry.name
                if entry.is_symlink():
                    raise UnsafePath(f"{rel}: is a symlink", {"file": rel})
                if entry.is_dir(follow_symlinks=False):
                    dirs.add(rel)
                    stack.append((Path(entry.path), rel + "/"))
                elif entry.is_file(follow_symlinks=False):
                    files.add(rel)
                else:
                    raise UnsafePath(f"{rel}: not a regular file", {"file": rel})
    return files, dirs


def identity(root: Path, listed: Iterable[str]) -> bytes | None:
    """A digest of what identifies each listed file on disk (device, inode, size, mode,
    mtime, ctime), or None when one is missing. Any write, chmod, utime, rename or
    replacement of a file moves its ctime, which only the kernel sets."""
    base, lines = str(root) + "/", []
    for rel in sorted(listed):
        try:
            lines.append(identity_line(rel, os.lstat(base + rel)))
        except FileNotFoundError:
            return None
    return identity_digest(lines)


def identity_line(rel: str, st: os.stat_result) -> str:
    return (f"{rel}\0{st.st_dev} {st.st_ino} {st.st_size} {st.st_mode} "
            f"{st.st_mtime_ns} {st.st_ctime_ns}\n")


def identity_digest(lines: list[str]) -> bytes:
    return hashlib.sha256("".join(lines).encode()).digest()


def make_readonly(root: Path) -> None:
    """chmod every directory 0555, deepest first and ``root`` last. Raises OSError."""
    _, dirs = scan(root)
    for rel in sorted(dirs, key=lambda d: d.count("/"), reverse=True):
        os.chmod(root / rel, RO_DIR, follow_symlinks=False)
    os.chmod(root, RO_DIR, follow_symlinks=False)


def make_durable(root: Path) -> None:
    """Flush every file and directory under ``root`` to stable storage.

    One syncfs(2) on the filesystem when libc has it: a release is ~1,000 files and one
    fsync each costs a journal commit each (seconds on a busy disk); syncfs flushes them
    together and, since Linux 5.8, reports writeback errors. Otherwise fsync each entry.
    Raises OSError.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if _SYNCFS is not None:
            if _SYNCFS(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"syncfs: {os.strerror(err)}", str(root))
            return
    finally:
        os.close(fd)
    files, dirs = scan(root)
    for rel in [*sorted(files | dirs), "."]:
        fd = os.open(root / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        func: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    return func


_SYNCFS = _load_syncfs() if sys.platform.startswith("linux") else None


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_tree(root: Path) -> None:
    """Remove a (possibly read-only) tree; never follows symlinks. Raises OSError.

    Holds one descriptor at a time however deep the tree: shutil.rmtree holds one per
    level, so a process short of descriptors, the very one whose seal or install just
    failed with EMFILE, could not remove the tree it leaves (a sealed release is 10
    levels deep). Paths, not descriptors, name what is removed: the trees removed here
    lie in our own private directories, where no one else can swap a component."""
    if not os.path.isdir(root) or os.path.islink(root):
        os.unlink(root)
        return
    os.chmod(root, 0o700)
    dirs = []
    # top-down: a dir is listed after its chmod; os.walk closes each listing before
    # it descends, so one descriptor is open at a time
    for here, dirnames, filenames in os.walk(root, onerror=_raise):
        dirs.append(here)
        for name in filenames:
            os.unlink(os.path.join(here, name))
        for name in list(dirnames):
            p = os.path.join(here, name)
            if os.path.islink(p):  # listed with the dirs when it points at one
                os.unlink(p)
                dirnames.remove(name)
            else:
                os.chmod(p, 0o700)
    for here in reversed(dirs):
        os.rmdir(here)


def _raise(exc: OSError) -> None:
    raise exc
