"""Whether the journal's writes work, told once per change instead of once per batch.

When the disk is full every batch fails (one every few milliseconds while an app
writes), and a warning per batch would flood the owner's own log on the same disk. So
a run of failures is logged when it begins, then at most once per REMIND_S with what it
cost so far, and once when a write works again; meanwhile :meth:`WriteHealth.to_wire`
says what fails, since when, and how many lines it dropped (the owner's ``status``
carries it, and ``tenure status`` prints it).

Thread-safe: the journal's writer thread reports, the event loop reads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["REMIND_S", "WriteHealth"]

log = logging.getLogger("tenure.owner.journal")

REMIND_S = 30.0


class WriteHealth:
    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, remind_s: float = REMIND_S) -> None:
        self._clock, self._wall, self._remind_s = clock, wall, remind_s
        self._lock = threading.Lock()
        self._error: str | None = None   # the last failure's text; None while writes work
        self._since = 0.0                # wall time of the run's first failure
        self._batches = self._lines = 0  # lost in this run
        self._told = 0.0                 # clock time of the last warning of this run

    def failed(self, exc: BaseException, lines: int) -> None:
        """A batch of ``lines`` lines could not be written and is dropped."""
        text = f"{type(exc).__name__}: {exc}"
        now = self._clock()
        with self._lock:
            first = self._error is None
            if first:
                self._since, self._batches, self._lines = self._wall(), 0, 0
            self._error = text
            self._batches += 1
            self._lines += lines
            remind = not first and now - self._told >= self._remind_s
            if first or remind:
                self._told = now
            batches, dropped = self._batches, self._lines
        if first:
            log.warning("journal writes fail (%s): log lines are dropped and counted until "
                        "a write works again", text)
        elif remind:
            log.warning("journal writes still fail (%s): %d batches, %d lines dropped so "
                        "far", text, batches, dropped)

    def succeeded(self) -> None:
        """A batch was written: a run of failures, if any, is over."""
        if not self.failing():   # the common case, without the lock
            return
        with self._lock:
            ended, self._error = self._error, None
            batches, dropped, since = self._batches, self._lines, self._since
        if ended is None:
            return
        log.warning("journal writes work again after %d failed batches (%d lines dropped, "
                    "for %.0f s)", batches, dropped, self._wall() - since)

    def failing(self) -> bool:
        return self._error is not None

    def to_wire(self) -> dict[str, Any] | None:
        """None while writes work; else the failure: ``error`` (the last one's text),
        ``since`` (wall time of the first), ``batches`` and ``lines`` dropped since."""
        with self._lock:
            if self._error is None:
                return None
            return {"error": self._error, "since": self._since, "batches": self._batches,
                    "lines": self._lines}
