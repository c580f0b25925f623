"""Telling a storage failure from a defect, at the RPC boundary.

A handler that meets a full disk raises whatever its storage raised: sqlite3's
OperationalError ("database or disk is full"), or an OSError (ENOSPC). The server's
catch-all used to answer INTERNAL naming only the exception's type ("upgrade failed:
OperationalError"), so the operator could not tell a full disk from a bug.
:func:`storage_failure` recognises the failures of the storage itself (SQLite's FULL,
IOERR, READONLY and CANTOPEN results; ENOSPC, EDQUOT, EIO, EROFS) and makes them
STORAGE_FAILED with their words, which name no data. Anything else stays a defect.
"""

from __future__ import annotations

import errno
import sys

from .errors import StorageFailed

__all__ = ["storage_failure"]

_SQLITE = ("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN")
_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})


def _paths(exc: OSError) -> str:
    """': PATH', or ': SOURCE -> TARGET' for a copy (the target is the one that failed)."""
    if not exc.filename:
        return ""
    return f": {exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 else "")


def storage_failure(exc: BaseException, what: str,
                    path: str | None = None) -> StorageFailed | None:
    """STORAGE_FAILED for ``exc`` when the storage itself failed (``what`` failed: the
    exception's type and words; ``path``, the file it failed on, in its data), else
    None."""
    sqlite3 = sys.modules.get("sqlite3")   # loaded wherever a database can fail
    if sqlite3 is not None and isinstance(exc, sqlite3.Error):
        if not str(getattr(exc, "sqlite_errorname", "")).startswith(_SQLITE):
            return None
        words = str(exc)
    elif isinstance(exc, OSError) and exc.errno in _ERRNOS:
        words = (exc.strerror or str(exc)) + _paths(exc)
    else:
        return None
    return StorageFailed(f"{what} failed: the storage failed ({type(exc).__name__}: "
                         f"{words}); the call stopped there",
                         {"exception": type(exc).__name__,
                          **({"path": path} if path is not None else {})})
