"""Give the C heap's free memory back to the system after a log backlog drained.

A burst of output (an app writing faster than the journal can store) queues up to the
journal's bound (256 MiB) of lines, each a Python object allocated by the pipe reader.
Once they are written and freed, glibc keeps the heap's pages: measured, an owner that
queued ~140 MiB stayed at 165 MiB resident, of which ``malloc_trim(0)`` gave back 100 MiB
(the rest is live objects spread over the heap). The journal calls :func:`trim` when a
backlog of at least TRIM_AFTER has drained, on its writer thread; it takes well under a
millisecond and needs ctypes, imported then and not before.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

__all__ = ["TRIM_AFTER", "trim"]

log = logging.getLogger(__name__)

TRIM_AFTER = 16 << 20   # a drained backlog at least this large gives its memory back

_malloc_trim: Callable[[int], Any] | None = None
_unavailable = False


def trim(backlog: int) -> None:
    """Return free heap pages to the system (glibc ``malloc_trim(0)``) after a backlog of
    ``backlog`` bytes drained, and log how much resident memory that gave back. Does
    nothing where the C library has no ``malloc_trim`` (musl). Raises nothing."""
    fn = _load()
    if fn is None:
        return
    before = _resident()
    fn(0)
    after = _resident()
    log.info("a log backlog of %d MiB was written; %d MiB of freed memory returned to the "
             "system (resident %d -> %d MiB)", backlog >> 20, max(before - after, 0) >> 20,
             before >> 20, after >> 20)


def _load() -> Callable[[int], Any] | None:
    global _malloc_trim, _unavailable
    if _malloc_trim is None and not _unavailable:
        try:
            import ctypes
            fn = ctypes.CDLL(None).malloc_trim   # this process's own C library
            fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
            _malloc_trim = fn
        except (OSError, AttributeError):
            _unavailable = True
    return _malloc_trim


def _resident() -> int:
    """This process's resident bytes (/proc/self/statm); 0 when unreadable."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
