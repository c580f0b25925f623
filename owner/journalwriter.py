"""The journal's writer thread (owner.journal): it takes batches from the queue
(owner.journalintake) and writes each in one transaction (owner.journaltables). After a
commit it checkpoints the WAL itself or asks the checkpointer thread to
(owner.journalckpt); with nothing queued it gives free pages back (owner.journalvacuum)
and empties a WAL longer than it keeps.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Final

from protocol.seldom import Seldom

from . import memtrim
from .journalckpt import COMMIT_FRAMES, Checkpointer, checkpoint, frames_for, truncate
from .journalhealth import WriteHealth
from .journalintake import Intake
from .journaltables import Tables
from .journalvacuum import GiveBack
from .logqueue import Queued

__all__ = ["BATCH_BYTES", "BATCH_ROWS", "BatchHook", "Writer"]

log = logging.getLogger("owner.journal")   # the logger the writer's warnings always had

CKPT_SAY_EVERY = 30.0
"""Seconds between two warnings of the writer's checkpoints failing (a full disk)."""

BATCH_ROWS: Final = 4096
BATCH_BYTES: Final = 4 << 20
"""Data a batch takes at most, besides its last append (one read of a pipe, <= 64 KiB):
one commit writes about this much WAL, which the WAL's cap must leave room for
(owner.journalckpt.BATCH_FRAMES); 4096 lines of 16 KiB would be 64 MiB."""
IDLE_RETRY_S: Final = 1.0
IDLE_RETRY_MAX_S: Final = 60.0
"""An idle truncate of a long WAL that was in a reader's way is tried again after
IDLE_RETRY_S, the wait doubling up to IDLE_RETRY_MAX_S (owner.journalckpt)."""

BatchHook = Callable[[int], None]


class Writer:
    """The journal's writer thread, started by the constructor; see the module docstring."""

    def __init__(self, intake: Intake, tables: Tables, ckpt: Checkpointer,
                 give_back: GiveBack, health: WriteHealth, *, batch_rows: int,
                 before_batch: BatchHook | None,
                 after_backlog: Callable[[int], None]) -> None:
        """Start the thread that writes what ``intake`` queues into ``tables``, telling
        ``health`` whether writes work; ``batch_rows``, ``before_batch`` and
        ``after_backlog`` are as owner.journal.Journal takes them."""
        self._intake = intake
        self._tables = tables
        self._ckpt = ckpt
        self._give_back = give_back
        self._health = health
        self._batch_rows = batch_rows
        self._before_batch = before_batch
        self._after_backlog = after_backlog
        self._ckpt_trouble = Seldom(CKPT_SAY_EVERY)   # the writer's failed checkpoints
        self._thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None) -> None:
        """Wait at most ``timeout`` seconds for the thread to end (after Intake.close)."""
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        """Whether the thread still runs."""
        return self._thread.is_alive()

    def _run(self) -> None:
        retry = None   # while the idle truncate of a long WAL is owed: when to try again
        while True:
            # wake for the owed truncate's retry, or a failed give-back's, the sooner
            waits = [t for t in (retry, self._give_back.quiet_for()) if t is not None]
            batch = self._intake.take(self._batch_rows, BATCH_BYTES, min(waits, default=None),
                                      self._give_back.pending)
            if batch is None:
                return
            if batch:
                drained = self._write(batch)
                del batch   # an idle writer holds no lines (a batch: up to 4 MiB, an append)
                if drained >= memtrim.TRIM_AFTER:
                    self._after_backlog(drained)
            if self._intake.empty():
                retry = self._when_idle(retry)

    def _when_idle(self, retry: float | None) -> float | None:
        """Nothing is queued: empty a WAL longer than it keeps (owner.journalckpt).
        Returns when to try again if that truncate was not done (a reader or a
        checkpoint was in the way: nothing else would try it before the next line),
        IDLE_RETRY_S and doubling to IDLE_RETRY_MAX_S; None once it was. Free pages are
        given back first (owner.journalvacuum); the truncate that empties the WAL then
        cuts the file to its pages."""
        if self._give_back.run(self._tables.conn, self._tables.lock, self._intake.busy,
                               self.wrote):
            self._ckpt.shrunk()
        if not self._ckpt.idle():
            return None
        self._checkpoint_now(truncate)
        if not self._ckpt.owed():
            return None
        return IDLE_RETRY_S if retry is None else min(retry * 2, IDLE_RETRY_MAX_S)

    def wrote(self, frames: int) -> None:
        """A maintenance step wrote about ``frames`` WAL frames (the writer's giving
        pages back, or owner.journal's stepwise deletes, between two batches): the
        checkpoint policy counts them as a batch's, and checkpoints here if it says so."""
        if self._ckpt.committed(frames + COMMIT_FRAMES):
            self._checkpoint_now(checkpoint)

    def _write(self, batch: list[Queued]) -> int:
        """Write ``batch`` (or count it lost) and release its room in the queue; returns
        the backlog's peak when this emptied the queue (FairQueue.written), else 0."""
        if self._before_batch is not None:
            self._before_batch(sum(len(item.lines) for item in batch))
        with self._tables.lock:
            error = self._tables.write(batch)
        if error is None:   # before a flush waiting for this batch returns
            self._health.succeeded()
        drained = self._intake.done(batch, error)
        if error is None:
            self._after_commit(batch)
        return drained

    def _after_commit(self, batch: list[Queued]) -> None:
        """Tell the checkpointer what a batch wrote; checkpoint here if it says so."""
        frames = frames_for(sum(item.data_bytes for item in batch),
                            sum(len(item.lines) for item in batch))
        if self._ckpt.committed(frames):
            self._checkpoint_now(checkpoint)

    def _checkpoint_now(self, how: Callable[[sqlite3.Connection], tuple[int, int, int]]
                        ) -> None:
        """The writer's own checkpoint (``how``: journalckpt.checkpoint or truncate),
        reported to the checkpointer; a failure is logged and left to the next one."""
        with self._tables.lock:
            try:
                result = how(self._tables.conn)
            except sqlite3.Error as exc:   # said at the first of a streak, then every
                if self._ckpt_trouble.due():   # CKPT_SAY_EVERY (it was one a batch, 20/s)
                    log.warning("journal checkpoint failed: %s", exc)
                return
        if self._ckpt_trouble.ended():
            log.warning("journal checkpoints work again")
        self._ckpt.checkpointed(*result, truncated=how is truncate)
