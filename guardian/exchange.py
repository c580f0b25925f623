"""Swap two directory entries in one step: renameat2(2) with RENAME_EXCHANGE.

A damaged installed release is replaced by a verified copy of the same release while a
backend may be running from it (guardian.release.install): its lazily imported modules
are read from that path at any moment, so the path must name one whole tree or the
other, never nothing in between, as a rename aside and a rename in would for an
instant. Both entries must exist in the same directory."""

from __future__ import annotations

import ctypes
import errno
import os

__all__ = ["exchange"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: os.PathLike[str] | str, b: os.PathLike[str] | str) -> None:
    """Atomically swap what ``a`` and ``b`` name (neither followed if a symlink). Raises
    OSError (ENOSYS or EINVAL where the kernel or the filesystem cannot exchange)."""
    libc = ctypes.CDLL(None, use_errno=True)
    func = getattr(libc, "renameat2", None)
    if func is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available here")
    if func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot exchange {a} and {b}: {os.strerror(err)}")
