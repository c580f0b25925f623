"""WAL checkpoints of the journal, off the writer's commit path.

SQLite checkpoints a WAL database inside the COMMIT that makes the WAL pass
``wal_autocheckpoint`` pages: copying the WAL into the database and syncing both took about
a fifth of the journal writer's time. The writer therefore turns automatic checkpoints off
and a :class:`Checkpointer` thread, on a connection of its own, runs PASSIVE checkpoints
(which never wait for, nor block, the writer or readers) each time the writer has written
about ``CKPT_FRAMES`` more WAL frames. SQLite starts the WAL over from its beginning only
when a write transaction begins with every frame copied, which a checkpoint running beside
a busy writer never achieves; so once the WAL is ``RESTART_FRAMES`` long the checkpointer
runs passes back to back until one finds at most ``TAIL_FRAMES`` new frames (or the WAL is
``CHASE_FRAMES`` long), and then the writer checkpoints those few itself (cheap), and its
next transaction restarts the WAL. The writer also checkpoints itself, as SQLite would,
when the WAL has grown by ``CAP_FRAMES`` since it last did (the checkpointer cannot keep
up, or a reader pins the WAL), waiting for a running pass to end first, and every
``CKPT_FRAMES`` once the checkpointer has failed: a failure is logged and counted, and ends
its thread. Frame counts the writer adds are estimates from the bytes and rows it wrote;
checkpoints report the true ones. A checkpoint never loses committed rows, and the last
connection to close (the writer's) checkpoints and removes the WAL, as before.

The WAL file keeps the length it once reached unless told otherwise: the writer's
connection sets ``journal_size_limit`` to ``KEEP_BYTES``, so the commit that starts the
WAL over truncates the file to that length; and once the writer has nothing queued and
the WAL may be longer than that, it runs a TRUNCATE checkpoint that does not wait for
readers (:func:`truncate`): a WAL left by a flood is emptied when the flood ends.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

CKPT_FRAMES: Final = 1000
"""WAL frames between two checkpoint passes (SQLite's default ``wal_autocheckpoint``)."""
RESTART_FRAMES: Final = 1000
"""A WAL this long is chased by the checkpointer and restarted by the writer."""
TAIL_FRAMES: Final = 64
"""The writer restarts the WAL when a pass found at most this many new frames..."""
CHASE_FRAMES: Final = 4000
"""...or when the WAL has grown this long all the same (a slow disk)."""
CAP_FRAMES: Final = 16384
"""The WAL is never longer (64 MiB at 4 KiB pages) while no reader pins it: the writer
checkpoints itself when one more batch could pass it (CAP_FRAMES - BATCH_FRAMES; a
test's smaller cap: at half of it)."""
PAGE_BYTES: Final = 4096
ROW_BYTES: Final = 64
"""Estimated bytes a record takes besides its data (overestimates rather than under)."""
COMMIT_FRAMES: Final = 3
"""Frames every commit writes at least (the meta and extents pages, the last leaf)."""
BATCH_FRAMES: Final = 2048
"""Frames one batch writes at most (owner.journalwriter.BATCH_BYTES and its last append,
their rows, the pages pruning rewrites): 8 MiB."""
KEEP_BYTES: Final = 4 << 20
"""``journal_size_limit``: the commit that starts the WAL over cuts the file back to
this (about RESTART_FRAMES), so a flood's WAL does not keep its length on disk."""
KEEP_FRAMES: Final = KEEP_BYTES // PAGE_BYTES
"""A writer with nothing queued truncates a WAL that may be longer than KEEP_BYTES."""


def frames_for(data_bytes: int, rows: int) -> int:
    """Estimated WAL frames one commit of ``rows`` lines of ``data_bytes`` writes."""
    return COMMIT_FRAMES + (data_bytes + ROW_BYTES * rows) // PAGE_BYTES


def checkpoint(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """One PASSIVE checkpoint: (busy, frames in the WAL, frames copied). Raises
    ``sqlite3.Error``."""
    busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return busy, frames, copied


def truncate(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """A TRUNCATE checkpoint that never waits: it copies every frame and cuts the WAL
    to nothing unless a reader is in the way (busy; then it is a PASSIVE one). Run by
    the writer between its transactions. Returns as :func:`checkpoint`; raises
    ``sqlite3.Error``."""
    (timeout,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute("PRAGMA busy_timeout=0")
    try:
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(timeout)}")
    return busy, frames, copied


class Checkpointer:
    """A thread that checkpoints the WAL when asked, and the writer's checkpoint policy.

    :meth:`committed` and :meth:`checkpointed` are called by the writer thread only.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._cond = threading.Condition(threading.Lock())
        self._asked = False  # a pass is wanted
        self._running = False  # a pass is running
        self._stopping = False
        self._broken = False
        self._frames = self._copied = 0  # as the checkpointer's last pass saw them
        self._since_asked = 0  # estimated frames since the last pass was asked for
        self._since_restart = 0  # estimated frames since the writer last caught up
        # the WAL's length after the writer caught up, until a commit starts it over
        # (and journal_size_limit cuts the file) or a truncate empties it
        self._unrestarted = 0
        self.failures = 0
        self.refusing = False   # the storage refused the last pass (a full disk)
        self._thread = threading.Thread(target=self._run, name="journal-checkpointer",
                                        daemon=True)
        self._thread.start()

    def committed(self, frames: int) -> bool:
        """The writer committed about ``frames`` WAL frames: True if it should checkpoint
        itself now (then report with :meth:`checkpointed`); else asks for a pass if due."""
        with self._cond:
            self._since_asked += frames
            self._since_restart += frames
            self._unrestarted = 0   # this commit started the WAL over if it was caught up
            if self._broken:
                return self._since_restart >= CKPT_FRAMES
            if max(self._since_restart, self._frames) >= max(CAP_FRAMES - BATCH_FRAMES,
                                                              CAP_FRAMES // 2):
                self._asked = False  # no new pass, and the one running ends soon:
                self._cond.wait_for(lambda: not self._running)  # PASSIVE never waits
                return True
            if self._asked or self._running:
                return False
            if self._frames >= RESTART_FRAMES and self._copied == self._frames:
                return True
            if self._since_asked >= CKPT_FRAMES:
                self._ask_locked()
        return False

    def idle(self) -> bool:
        """The writer has nothing queued: True if it should truncate the WAL now
        (:func:`truncate`, then report with :meth:`checkpointed`), which it does once
        the WAL may be longer than KEEP_BYTES. A pass running is waited for."""
        with self._cond:
            if self._longest() < KEEP_FRAMES:
                return False
            self._asked = False
            self._cond.wait_for(lambda: not self._running)
            return True

    def shrunk(self) -> None:
        """The database file may be longer than its pages now (free pages were given
        back, owner.journalvacuum): only a checkpoint that copies the whole WAL cuts it,
        so the next idle truncate is owed whatever the WAL's length. Raises nothing."""
        with self._cond:
            self._unrestarted = max(self._unrestarted, KEEP_FRAMES)

    def owed(self) -> bool:
        """Whether the WAL may still be longer than KEEP_BYTES (an idle truncate that
        was in someone's way). Raises nothing."""
        with self._cond:
            return self._longest() >= KEEP_FRAMES

    def _longest(self) -> int:
        """How many frames long the WAL file may be now (an estimate)."""
        return max(self._since_restart, self._frames, self._unrestarted)

    def checkpointed(self, busy: int, frames: int, copied: int, *,
                     truncated: bool = False) -> None:
        """The writer's own checkpoint gave ``(busy, frames, copied)``; ``truncated``:
        it was a truncate (:func:`truncate`), which empties the file when it catches up."""
        with self._cond:
            if busy or copied != frames:  # a reader or another checkpoint was in the way
                self._frames, self._copied = frames, copied
                return
            self._since_restart = 0
            self._frames = self._copied = 0  # the next transaction restarts the WAL
            # until then the file keeps its length: a flood that ends right after this
            # leaves it to the idle truncate (was: nothing cut it until the next line)
            self._unrestarted = 0 if truncated else frames

    def ask(self) -> None:
        """Ask for a pass now (after a large delete, say). Raises nothing."""
        with self._cond:
            self._ask_locked()

    def _ask_locked(self) -> None:
        self._since_asked = 0
        self._asked = True
        self._cond.notify()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread (a running pass completes) and wait for it; its connection is
        closed. Idempotent. Raises nothing."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no pass is asked for or running. For tests."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not (self._asked or self._running) or self._broken, timeout)

    def _run(self) -> None:
        try:
            conn = self._connect()
        except Exception:
            self._fail()
            return
        try:
            while self._next():
                try:
                    _, frames, copied = checkpoint(conn)
                except sqlite3.OperationalError as exc:   # a full or failing disk: the
                    self._refused(exc)                      # next pass tries again
                    continue
                self._refused(None)
                with self._cond:
                    # A WAL due for a restart is chased until one pass copies only a
                    # few frames (then so will the writer's own checkpoint), or is long.
                    grown = frames - self._frames if frames >= self._frames else frames
                    self._frames, self._copied = frames, copied
                    self._running = False
                    self._asked = self._asked or (RESTART_FRAMES <= frames < CHASE_FRAMES
                                                  and copied == frames
                                                  and grown > TAIL_FRAMES)
                    self._cond.notify_all()
        except Exception:
            self._fail()
        finally:
            conn.close()
            with self._cond:  # whatever ended the thread, no pass runs any more
                self._broken = self._broken or not self._stopping
                self._running = False
                self._cond.notify_all()

    def _next(self) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self._asked or self._stopping)
            self._asked = False
            self._running = not self._stopping
            return self._running

    def _refused(self, exc: sqlite3.Error | None) -> None:
        """A pass the storage refused (None: one it took): said once per streak. The
        first refusal ended the thread for the owner's life (the writer then carried
        every checkpoint, a fifth of its time, said nowhere)."""
        with self._cond:
            if exc is not None:
                self._running = False
                self._cond.notify_all()
                if not self.refusing:
                    log.warning("journal checkpoint refused (%s); tried again at the "
                                "next pass", exc)
                self.refusing = True
                self.failures += 1
            elif self.refusing:
                self.refusing = False
                log.warning("journal checkpoints work again")

    def _fail(self) -> None:
        log.exception("journal checkpointer failed; the writer checkpoints the WAL itself")
        with self._cond:
            self.failures += 1
            self._broken = True
            self._cond.notify_all()
