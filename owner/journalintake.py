"""The hand-off between the journal's producers and its writer thread (owner.journal): the
bounded, fair queue (owner.logqueue) under one condition, with the sequence numbers a
flush waits for, the journal's closed flag, and the counts of lines written and dropped.

Producers :meth:`Intake.offer` lines, which never blocks; the writer thread takes a batch
(:meth:`Intake.take`), writes it, and reports it (:meth:`Intake.done`). Every method takes
the condition itself.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Callable

from .appcounts import AppCounts
from .journalhealth import WriteHealth
from .journalsource import LogSource
from .logqueue import FairQueue, Queued

__all__ = ["Intake"]


class Intake:
    """The queue between the journal's producers and its writer; see the module docstring."""

    def __init__(self, queue_bytes: int, health: WriteHealth) -> None:
        """``queue_bytes`` bounds the queue (owner.logqueue); a batch the writer could
        not write is told to ``health`` once its lines are counted dropped."""
        self._cond = threading.Condition(threading.Lock())
        self._queue = FairQueue(queue_bytes)
        self._seq = 0  # sequence number of the last accepted append
        self._writing: int | None = None  # oldest sequence number in the writer's batch
        self._writer_idle = False
        self._stopping = False
        self.closed = False   # set under the condition; the journal's calls read it bare
        self._overflow: dict[LogSource, int] = {}
        self._overflow_total = 0
        self._dropped_by_app = AppCounts(1)    # lines (owner.appcounts: bounded)
        self._written_by_app = AppCounts(2)    # lines, data bytes
        self._health = health

    # -- producer side -------------------------------------------------------------------

    def offer(self, source: LogSource, stream: str, ts: float,
              lines: list[bytes | bytearray], flags: list[int] | None) -> int:
        """Queue one append of checked lines (owner.journal.Journal.append_split); never
        blocks. Returns how many lines were accepted: the rest are counted dropped."""
        with self._cond:
            if self.closed:
                self._count_lost_locked(source, len(lines))
                return 0
            accepted, lost, evicted = self._queue.offer(source, stream, ts, lines,
                                                        self._seq + 1, flags)
            for src, n in lost.items():
                self._count_lost_locked(src, n)
            if evicted:
                self._cond.notify_all()  # a flush may have waited for what was dropped
            if not accepted:
                return 0
            self._seq += 1
            if self._writer_idle:
                self._cond.notify()
        return accepted

    def _count_lost_locked(self, source: LogSource, n: int) -> None:
        if n:
            self._overflow[source] = self._overflow.get(source, 0) + n
            self._overflow_total += n
            self._dropped_by_app.add((source.stack, source.app), n)

    def _count_written_locked(self, batch: list[Queued]) -> None:
        for item in batch:
            self._written_by_app.add((item.source.stack, item.source.app),
                                     len(item.lines), item.data_bytes)

    def written_by_app(self) -> dict[tuple[str, str], tuple[int, ...]]:
        """(lines, data bytes) committed per (stack, app) (Journal.written_by_app)."""
        with self._cond:
            return self._written_by_app.sums()

    def dropped_by_app(self) -> dict[tuple[str, str], int]:
        """Lines dropped per (stack, app) (Journal.dropped_by_app)."""
        with self._cond:
            return {app: n for app, (n,) in self._dropped_by_app.sums().items()}

    def take_overflow(self) -> dict[LogSource, int]:
        """Return and reset the per-source dropped-line counts not reported yet."""
        with self._cond:
            taken, self._overflow = self._overflow, {}
        return taken

    @property
    def overflow_total(self) -> int:
        """Lines dropped (queue full, closed, or write failure) since the journal opened."""
        with self._cond:
            return self._overflow_total

    @property
    def queued_bytes(self) -> int:
        """Bytes (data plus per-line overhead) waiting for the writer."""
        with self._cond:
            return self._queue.queued_bytes

    def flush(self, timeout: float | None) -> bool:
        """Wait until every append made before this call is written or counted lost;
        False if ``timeout`` seconds passed first (Journal.flush)."""
        with self._cond:
            target = self._seq
            return self._cond.wait_for(lambda: self._unfinished() > target, timeout)

    def _unfinished(self) -> int | float:
        """The oldest sequence number not yet written or counted lost (inf if none)."""
        if self._writing is not None:
            return self._writing  # a batch is always older than what is still queued
        oldest = self._queue.oldest_seq()
        return math.inf if oldest is None else oldest

    def close(self) -> bool:
        """Refuse later appends and tell the writer to stop once the queue is empty.
        Returns False if this was done before."""
        with self._cond:
            if self.closed:
                return False
            self.closed = True
            self._stopping = True
            self._cond.notify_all()
        return True

    def wake(self) -> None:
        """An idle writer looks at what a maintenance call left it (free pages)."""
        with self._cond:
            self._cond.notify_all()

    # -- writer side ---------------------------------------------------------------------

    def take(self, rows: int, nbytes: int, retry: float | None,
             idle_work: Callable[[], bool]) -> list[Queued] | None:
        """Block until work arrives; None once stopping with an empty queue; [] when
        ``retry`` seconds passed with nothing to write (an idle truncate is owed), or
        when ``idle_work()`` says the idle writer has work of its own (free pages to give
        back). A batch is the oldest appends, up to ``rows`` lines and ``nbytes`` of data
        (owner.logqueue.FairQueue.take)."""
        with self._cond:
            while True:
                while not self._queue:
                    if self._stopping:
                        return None
                    if idle_work():
                        return []
                    self._writer_idle = True
                    woke = self._cond.wait(retry)
                    self._writer_idle = False
                    if not woke and not self._queue and not self._stopping:
                        return []
                batch = self._queue.take(rows, nbytes)
                if batch:
                    self._writing = batch[0].seq
                    return batch

    def empty(self) -> bool:
        """Whether nothing is queued."""
        with self._cond:
            return not self._queue

    def busy(self) -> bool:
        """Whether the writer has lines to write, or is closing."""
        with self._cond:
            return bool(self._queue) or self._stopping

    def done(self, batch: list[Queued], error: sqlite3.Error | None) -> int:
        """The writer wrote ``batch``, or lost it to ``error``: count it, release its room
        in the queue and wake a flush waiting for it. Returns the backlog's peak when
        this emptied the queue (FairQueue.written), else 0."""
        with self._cond:
            if error is None:
                self._count_written_locked(batch)
            else:   # counted before the failure shows: a reader never sees it uncounted
                for item in batch:
                    self._count_lost_locked(item.source, len(item.lines))
                self._health.failed(error, sum(len(item.lines) for item in batch))
            drained = self._queue.written(batch)
            self._writing = None
            self._cond.notify_all()
        return drained
