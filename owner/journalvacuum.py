"""Giving the journal's free pages back to the file system.

Pruning (a budget reached or lowered, ``logs.forget``) frees pages inside journal.db.
SQLite reuses them for later lines but never shortens the file by itself, so a journal
that once held 1 GiB kept its 1 GiB after its budgets fell to 10 MiB.

A journal is created with ``auto_vacuum=INCREMENTAL``: free pages stay on SQLite's free
list and are reused as before, until the writer thread releases them. It does when it has
nothing queued and more than SLACK_PAGES are free: all of them, STEP_PAGES per
transaction, looking at its queue between two (a line that comes meanwhile waits for one
step, and the next idle goes on, past the slack if need be), then a TRUNCATE
checkpoint cuts the file to its pages (at once unless a reader holds an older snapshot;
then a later checkpoint does). A flood's own pruning leaves about a batch free
(owner.journalwriter: 4 MiB of data), under the slack, so steady logging at a budget does
not shrink and regrow the file.

A journal created by an older owner has no map of its pages (``auto_vacuum`` none) and can
only get one by a VACUUM, which rewrites every live page while lines wait in the queue:
the writer does that once, idle with more than SLACK_PAGES free, if at most
CONVERT_MAX_PAGES are live; a larger one keeps its free pages for later lines, as before
(logged once per open).

Used by the writer thread only; every step runs under the caller's writer lock.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["GiveBack", "Pages", "pages", "start_incremental"]

log = logging.getLogger(__name__)

SLACK_PAGES = 2048
"""Free pages (8 MiB at 4 KiB) a journal keeps without giving any back."""
STEP_PAGES = 256
"""Pages released per transaction (1 MiB; 1.1 ms here in the median, 10.5 ms at most, of
19 steps over scattered free pages)."""
CONVERT_MAX_PAGES = 8192
"""Live pages (32 MiB) up to which an older journal is converted: its VACUUM took 97 ms
for 24 MiB here and writes about as many WAL frames, under the WAL's cap
(owner.journalckpt)."""
QUIET_S = 60
"""After a failed step, no new one for this long: a full disk fails every step, and a
flood prunes with every batch."""
INCREMENTAL = 2   # PRAGMA auto_vacuum's value for INCREMENTAL


def start_incremental(conn: sqlite3.Connection) -> None:
    """Make a new, empty database free-page aware; before its first table and before
    its journal mode is set (SQLite ignores it after either). Raises sqlite3.Error."""
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")


@dataclass(frozen=True)
class Pages:
    total: int
    free: int
    incremental: bool


def pages(conn: sqlite3.Connection) -> Pages:
    """The file's page count, free pages and mode (reads its header). Raises
    sqlite3.Error."""
    (total,) = conn.execute("PRAGMA page_count").fetchone()
    (free,) = conn.execute("PRAGMA freelist_count").fetchone()
    (mode,) = conn.execute("PRAGMA auto_vacuum").fetchone()
    return Pages(total, free, mode == INCREMENTAL)


class GiveBack:
    """When to give free pages back, and the steps that do (see the module text).

    :meth:`freed` is called by whatever freed pages, from any thread; an open journal
    may hold free pages from before, so one is due at first. The writer asks
    :meth:`pending` when idle and then calls :meth:`run`, which looks at the free list
    and clears what it was asked for (what is freed meanwhile stays due). After a failed
    step none is tried for QUIET_S, then the writer tries again (:meth:`quiet_for`).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._asked = 1            # freed() calls; _seen: how many a run has taken up
        self._seen = 0
        self._clock = clock
        self._quiet_until = 0.0    # after a failure: no new try before (QUIET_S)
        self.released = 0          # pages given back since open, for tests and stats
        self._uncut = 0            # released pages no finished give-back has reported
        self._going = False        # a give-back stopped for lines: goes on past the slack
        self._too_large_told = False

    def freed(self) -> None:
        self._asked += 1

    @property
    def due(self) -> bool:
        """Pages were freed since a give-back last looked, or one was interrupted."""
        return self._asked != self._seen

    def pending(self) -> bool:
        """Whether the idle writer should :meth:`run` now."""
        return self.due and self.quiet_for() is None

    def quiet_for(self) -> float | None:
        """Seconds until a give-back that is due may be tried after a failure; None when
        none waits."""
        if not self.due or not self._quiet_until:   # the writer asks at every batch
            return None
        left = self._quiet_until - self._clock()
        return left if left > 0 else None

    def run(self, conn: sqlite3.Connection, lock: threading.Lock,
            busy: Callable[[], bool], wrote: Callable[[int], None]) -> bool:
        """Give back what is due until done or ``busy()`` (lines are queued: it stays due
        and the next idle goes on). ``wrote(frames)`` is told each step's WAL frames.
        Returns True once a give-back finished that released pages (the caller then
        truncates the WAL, which cuts the file). Raises nothing: a failure is logged."""
        if not self.pending():
            return False
        asked = self._asked
        try:
            with lock:
                now = pages(conn)
            if now.free <= SLACK_PAGES and not self._going:
                return self._done(asked)
            if not now.incremental:
                self._convert(conn, lock, now, wrote)
                return self._done(asked)
            self._going = True   # once started, to the last free page
            while now.free > 0:
                if busy():
                    return False   # still due: the next idle goes on
                with lock:
                    # a page a step of the statement, and it has no rows for execute()
                    # to step through: executescript runs it to its end
                    conn.executescript(f"PRAGMA incremental_vacuum({STEP_PAGES});")
                    after = pages(conn)
                if after.total >= now.total:   # the file did not shrink: nothing to do
                    break
                self._gave(now.total - after.total, wrote)
                now = after
        except Exception as exc:   # the writer thread goes on whatever this raised
            self._quiet_until = self._clock() + QUIET_S
            self._going = False
            log.warning("journal: giving free pages back failed (tried again in %d s): "
                        "%s", QUIET_S, exc, exc_info=not isinstance(exc, sqlite3.Error))
            return False
        return self._done(asked)

    def _done(self, asked: int) -> bool:
        """A give-back finished: what was asked before it began is taken up (a later
        freed() stays due). True when it, or one it went on from, released pages."""
        self._seen, self._going, self._quiet_until = asked, False, 0.0
        cut, self._uncut = self._uncut > 0, 0
        return cut

    def _gave(self, n: int, wrote: Callable[[int], None]) -> None:
        """``n`` pages went back. They count as WAL frames written (about what moving
        them wrote, and no fewer than what the truncate after must cover to cut them)."""
        self.released += n
        self._uncut += n
        wrote(n)

    def _convert(self, conn: sqlite3.Connection, lock: threading.Lock, now: Pages,
                 wrote: Callable[[int], None]) -> None:
        live = now.total - now.free
        if live > CONVERT_MAX_PAGES:
            if not self._too_large_told:
                self._too_large_told = True
                log.info("journal: %d of its %d pages are free, but it predates giving "
                         "them back and is too large (%d live pages, more than %d) to be "
                         "rewritten while lines wait: they stay free for later lines",
                         now.free, now.total, live, CONVERT_MAX_PAGES)
            return
        with lock:
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("VACUUM")
            after = pages(conn)
        self._gave(now.total - after.total, wrote)
        log.info("journal: rewritten to give %d free pages back (%d pages now); from now "
                 "on free pages are given back as they come", now.total - after.total,
                 after.total)
