"""The daemons' own log (``HOME/logs/owner.log``, ``guardian.log``, ``backend-….log``):
one line per record on stderr, and a write the disk refuses is said once it takes
writes again, not with a traceback per record.

logging's default answer to a failed write is ``--- Logging error ---`` and a
traceback, written to the same stderr: on a full disk the log filled with fragments of
them as space came and went. Here a record whose write fails with an OSError is
counted; the next record that is written is preceded by one line saying how many
writes failed and why. (What failed may still reach the file later: stderr keeps
what it could not write in its buffer, so the line says records *may* be missing.)
Any other failure (a record that cannot be formatted: a bug) keeps logging's
traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

__all__ = ["DaemonLogHandler", "setup"]


class DaemonLogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler that counts the writes its stream refused (see the module)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self.failed = 0
        self.why = ""

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed:   # said first; a write of it that fails counts itself
            failed, self.failed = self.failed, 0
            super().emit(logging.makeLogRecord({
                "name": record.name, "levelno": logging.WARNING, "levelname": "WARNING",
                "msg": "%d log writes failed (%s); records from then may be missing",
                "args": (failed, self.why)}))
            if self.failed:   # the disk still refuses: this record is not tried
                self.failed += failed
                return
        super().emit(record)

    def _count(self, exc: OSError) -> None:
        self.failed += 1
        self.why = os.strerror(exc.errno) if exc.errno else type(exc).__name__

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            self._count(exc)
            return
        super().handleError(record)


def setup(daemon: str, level: str) -> None:
    """The root logger of daemon ``daemon`` (owner, guardian, backend) at ``level``:
    ``TIME DAEMON LEVEL MESSAGE`` on stderr."""
    handler = DaemonLogHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s {daemon} %(levelname)s %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])
