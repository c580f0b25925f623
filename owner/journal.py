"""The application log journal: ``journal.db`` (SQLite, WAL, synchronous=NORMAL).

Producers (pipe drainers on the owner's asyncio loop) call :meth:`Journal.append`, which
only enqueues: a bounded in-memory queue (bounded by bytes, fair between apps: see
:mod:`owner.logqueue`) feeds one writer thread that inserts batches with
``executemany``, one transaction per batch; a checkpointer thread keeps the WAL short off
the writer's commit path (see :mod:`owner.journalckpt`). A full queue drops lines and
counts them per source and per app; appending never blocks and never raises for lack of
room.

Record ids increase monotonically and are never reused, even after pruning: the writer
keeps the next id in ``meta`` inside each batch transaction and gives the first row of
every append its id explicitly (SQLite would otherwise reuse ids of deleted newest rows).

Retention is per app (stack + app) and needs no index on the record table: every app's
rows are covered by *extents* ``(first_id, last_id, bytes)``; an extent may span other
apps' rows. Pruning deletes the oldest extents of an app (an id-range delete filtered by
app) until its byte total fits, after each append of a batch that passes it (the freed
pages are reused by the rest of the batch: journal.db stays about the budgets); totals
live in memory and are rebuilt from the small extents table at open. Filtered reads use
the same extents to skip foreign id ranges.
:meth:`Journal.forget` deletes the lines of named instances, :meth:`Journal.forget_apps`
those of whole apps (owner.journalforget).

:class:`Journal` is the store the owner uses; its parts live in their own modules: the
queue's hand-off to the writer (owner.journalintake), the writer thread
(owner.journalwriter), the tables it writes and prunes (owner.journaltables), and the
checks of names and sources (owner.journalsource).
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final, TypeVar

from protocol.errors import BadRequest, ShuttingDown

from . import memtrim
from .journalckpt import PAGE_BYTES, Checkpointer
from .journaldb import FORMAT_VERSION, check_schema, connect, on_disk, open_private
from .journalforget import APPS_PAGE, AppLines, Forgetting, apps_kept
from .journalhealth import WriteHealth
from .journalintake import Intake
from .journalread import STREAMS, Filters, LogRecord, Page, read_at, refuse_damage
from .journalretention import MAX_RETENTION, MIN_RETENTION
from .journalsource import LogSource, check_int, check_name
from .journaltables import Step, Tables
from .journalvacuum import GiveBack
from .journalwriter import BATCH_ROWS, BatchHook, Writer

__all__ = [
    "FORMAT_VERSION",
    "READ_LIMIT_MAX",
    "STREAMS",
    "Journal",
    "LogRecord",
    "LogSource",   # owner.journalsource; named here with the Journal that takes it
    "Page",
    "check_schema",
]

_T = TypeVar("_T")
READ_LIMIT_MAX: Final = 10_000


class Journal:
    """Durable, bounded, non-blocking application log store. See the module docstring."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        queue_bytes: int = 256 << 20,
        retention_bytes_per_app: int = 64 << 20,
        batch_rows: int = BATCH_ROWS,
        clock: Callable[[], float] = time.time,
        before_batch: BatchHook | None = None,
        after_backlog: Callable[[int], None] = memtrim.trim,
    ) -> None:
        """Open (or create) the journal and start its writer thread.

        ``before_batch`` is a test seam called on the writer thread with the row count of
        each batch before it is written; ``after_backlog(peak)`` runs there once a
        backlog of at least memtrim.TRIM_AFTER bytes has drained (owner.memtrim).
        Raises ``UnsafePath`` (symlink, not a regular file, cannot open),
        ``StateCorrupt`` (not a journal, unknown format version, a damaged page or row
        read at open, e.g. a name that is not UTF-8; the file is left untouched) and
        ``BadRequest`` (bad limits).
        """
        self._path = os.fspath(path)
        queue_max = check_int("queue_bytes", queue_bytes, 1)
        retention = check_int("retention_bytes_per_app", retention_bytes_per_app, 1)
        batch_rows = check_int("batch_rows", batch_rows, 1)
        self._clock = clock
        open_private(self._path)
        self._give_back = GiveBack()   # free pages back to the disk (owner.journalvacuum)
        # the writer's connection, ids, per-app totals and budgets (owner.journaltables)
        self._tables = Tables(self._path, retention, self._give_back)
        self._rconn: sqlite3.Connection | None = None
        self._rlock = threading.Lock()
        self.health = WriteHealth()   # whether writes work (owner.journalhealth)
        # the queue to the writer thread, and what was written and dropped (journalintake)
        self._intake = Intake(queue_max, self.health)
        self._ckpt = Checkpointer(lambda: connect(self._path))
        self._writer = Writer(self._intake, self._tables, self._ckpt, self._give_back,
                              self.health, batch_rows=batch_rows, before_batch=before_batch,
                              after_backlog=after_backlog)   # starts the writer thread

    # -- producer side -----------------------------------------------------------------

    def append(self, source: LogSource, stream: str,
               lines: Sequence[tuple[bytes, int]]) -> int:
        """Enqueue ``lines`` (``(data, flags)`` pairs) from ``source``; never blocks.

        Returns how many lines were accepted; the rest were dropped for lack of queue room
        (or because the journal is closed) and counted in :meth:`take_overflow`.
        Raises ``BadRequest`` for a wrong source type or unknown stream.
        """
        flags = [f for _, f in lines]
        return self.append_split(source, stream, [d for d, _ in lines],
                                 flags if any(flags) else None)

    def append_split(self, source: LogSource, stream: str,
                     lines: list[bytes | bytearray], flags: list[int] | None = None) -> int:
        """:meth:`append` with the lines as two parallel lists: their data and their
        flags (``None``: all 0), as :meth:`owner.linesplit.LineSplitter.split` gives them.

        The journal keeps the lists (the caller must not change them afterwards); a
        ``bytearray`` is stored as the same BLOB as ``bytes``, only cheaper to bind.
        """
        if not isinstance(source, LogSource):
            raise BadRequest("source must be a LogSource")
        if stream not in STREAMS:
            raise BadRequest("stream must be 'stdout' or 'stderr'", {"stream": str(stream)})
        if not lines:
            return 0
        ts = self._clock()
        return self._intake.offer(source, stream, ts, lines, flags)

    def written_by_app(self) -> dict[tuple[str, str], tuple[int, ...]]:
        """(lines, data bytes) committed per (stack, app) since this Journal opened (never
        reset; pruning and forgetting do not take them back; the apps of the last
        owner.appcounts.APPS_MAX counted)."""
        return self._intake.written_by_app()

    def size_bytes(self) -> int:
        """Bytes the journal takes on disk: the database and its WAL. Raises nothing."""
        return on_disk(self._path)

    def dropped_by_app(self) -> dict[tuple[str, str], int]:
        """Lines dropped per (stack, app) since this Journal opened (never reset; the
        apps of the last owner.appcounts.APPS_MAX counted)."""
        return self._intake.dropped_by_app()

    def take_overflow(self) -> dict[LogSource, int]:
        """Return and reset the per-source dropped-line counts not reported yet."""
        return self._intake.take_overflow()

    @property
    def overflow_total(self) -> int:
        """Lines dropped (queue full, closed, or write failure) since this Journal opened."""
        return self._intake.overflow_total

    @property
    def checkpoint_failures(self) -> int:
        """1 if the checkpointer thread failed (logged; the writer checkpoints itself)."""
        return self._ckpt.failures

    @property
    def queued_bytes(self) -> int:
        """Bytes (data plus per-line overhead) waiting for the writer."""
        return self._intake.queued_bytes

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every append made before this call is committed (or counted lost).

        Returns False if ``timeout`` seconds passed first. Raises nothing.
        """
        return self._intake.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the writer thread and close the database. Idempotent.

        Later appends are dropped and counted. Raises nothing.
        """
        if not self._intake.close():
            return
        self._writer.join(timeout)
        self._ckpt.stop(timeout)
        with self._rlock:
            if self._rconn is not None:
                self._rconn.close()
                self._rconn = None
        if not self._writer.is_alive():
            with self._tables.lock:
                self._tables.conn.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- retention and forgetting -------------------------------------------------------

    def retention(self) -> tuple[int, dict[tuple[str, str], int]]:
        """The default budget, and the apps' own (journalretention)."""
        with self._tables.lock:
            return self._tables.retention()

    def set_retention(self, budgets: Mapping[tuple[str, str], int],
                      keep_unnamed: bool = False) -> None:
        """Give these apps their own budget, stored durably in one transaction, then
        prune at once what a smaller budget no longer keeps, in steps of at most
        STEP_BYTES (owner.journaltables). An app named with the
        default has none of its own. An app not named has the default, or with
        ``keep_unnamed`` keeps the budget stored for it while it has lines (an app taken
        out of the config keeps its lines within the budget it had until they are
        forgotten; a backend that knows it asks for it: an older one, which names only
        the apps with a budget of their own, means the others to have the default). Safe
        from any thread. Raises ``BadRequest`` (a malformed name, a budget out of
        [MIN_RETENTION, MAX_RETENTION]), ``ShuttingDown`` (a closed journal) and
        ``StorageFailed`` (storing the budgets failed: nothing changed; or a step of the
        pruning failed: the budgets are stored, and an app's next batch or the next
        call prunes on)."""
        checked = {(check_name("stack", st), check_name("app", app)):
                   check_int("budget", n, MIN_RETENTION) for (st, app), n in budgets.items()}
        if any(n > MAX_RETENTION for n in checked.values()):
            raise BadRequest(f"a log budget is at most {MAX_RETENTION} bytes")
        if any("/" in st + app for st, app in checked):
            raise BadRequest("a stack or app name with a budget has no '/'")
        self._maintain("setting log budgets",
                       lambda conn: self._tables.set_budgets(conn, checked, keep_unnamed))
        self._stepwise("pruning to the log budgets", self._tables.prune_step)
        self._intake.wake()

    def forget(self, sources: Sequence[tuple[str, str, int]], timeout: float = 30.0) -> int:
        """Delete every line of each ``(stack, app, instance)``, and the marks of what
        retention pruned of it (see :mod:`owner.journalforget`); lines still queued are
        written first, so they go too. The sources of one app go together, app after
        app in (stack, app) order, in steps of at most STEP_BYTES, the last of them
        taking the marks: the writer's batches go on between two, and journal.db-wal
        stays under its cap however large their output is. Returns how many lines
        went: 0 when none were left. Safe from any thread. Raises ``BadRequest`` (a
        malformed source), ``ShuttingDown`` (a closed journal) and ``StorageFailed``
        naming the source, or the instances of one app, where it stopped: what the
        steps before the failed one deleted stays deleted (the apps before it are gone,
        of it some lines may be), and a retry goes on."""
        checked = [(check_name("stack", st), check_name("app", app),
                    check_int("instance", inst)) for st, app, inst in sources]
        by_app: dict[tuple[str, str], set[int]] = {}
        for stack, app, instance in checked:
            by_app.setdefault((stack, app), set()).add(instance)
        return self._forget([Forgetting(key, frozenset(instances))
                             for key, instances in sorted(by_app.items())], timeout)

    def forget_apps(self, apps: Sequence[tuple[str, str]], timeout: float = 30.0) -> int:
        """:meth:`forget` of every source of each ``(stack, app)``: all its lines, and
        the marks of what retention pruned of it (of instances with no line left too);
        an app's lines go in steps of at most STEP_BYTES, the last one taking the marks
        (the writer goes on between two). Raises as :meth:`forget`, StorageFailed naming
        the app where it stopped (those before it are gone, and its lines deleted
        before the failed step)."""
        checked = sorted({(check_name("stack", st), check_name("app", app))
                          for st, app in apps})
        return self._forget([Forgetting(key, None) for key in checked], timeout)

    def apps(self, after: tuple[str, str] | None = None,
             limit: int = APPS_PAGE) -> list[AppLines]:
        """Each app with lines kept, ``(stack, app, bytes, time of its newest line)``, in
        order after ``after``, at most ``limit`` (:func:`owner.journalforget.apps_kept`).
        Safe from any thread. Raises ``ShuttingDown`` for a closed journal and
        ``StateCorrupt`` for a damaged one (owner.journalread.refuse_damage)."""
        with self._rlock, refuse_damage(self._path):
            conn = self._reader()
            conn.execute("BEGIN")
            try:
                return apps_kept(conn, after, limit)
            finally:
                conn.execute("ROLLBACK")

    def _forget(self, jobs: list[Forgetting], timeout: float) -> int:
        """Flush, then each of ``jobs`` in its steps (:meth:`_stepwise`); returns the
        lines deleted. Raises as :meth:`_stepwise`."""
        self.flush(timeout)
        deleted = 0
        try:
            for job in jobs:
                deleted += self._stepwise(job.what(), functools.partial(
                    self._tables.forget_step, job=job))
        finally:
            self._ckpt.ask()  # the deletes may have rewritten many pages
            self._intake.wake()
        return deleted

    def _stepwise(self, what: str, step: Callable[[sqlite3.Connection], Step]) -> int:
        """``step`` in one transaction after another (:meth:`_maintain`) until it says
        nothing is left, each deleting at most about STEP_BYTES, the writer's batches
        and the checkpoints that keep the WAL under its cap going in between
        (owner.journaltables.STEP_BYTES). Returns the records the steps deleted. Raises
        as :meth:`_maintain`; what the steps before a failed one deleted stays deleted."""
        records = 0
        while True:
            done = self._maintain(what, step)
            records += done.records
            self._writer.wrote(done.freed // PAGE_BYTES)
            if not done.more:
                return records

    def _maintain(self, what: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """``work(conn)`` in one transaction of the writer's connection, between two
        batches (owner.journaltables.Tables.maintain: committed whole, or not at all).
        Raises ShuttingDown on a closed journal (the owner is stopping), else as
        Tables.maintain."""
        with self._tables.lock:
            if self._intake.closed:
                raise ShuttingDown("journal is closed")
            return self._tables.maintain(what, work)

    # -- readers -------------------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        if self._rconn is None:
            if self._intake.closed:
                raise ShuttingDown("journal is closed")
            self._rconn = connect(self._path)
            self._rconn.execute("PRAGMA query_only=1")
        return self._rconn

    def last_id(self) -> int:
        """The highest id ever committed (0 if none); pruning never lowers it.

        Kept by the writer as it commits, so it never waits behind a read in progress
        (the owner's ``status`` asks for it). Raises ``ShuttingDown`` if the journal is
        closed.
        """
        if self._intake.closed:
            raise ShuttingDown("journal is closed")
        return self._tables.last_id

    def read(self, after_id: int, limit: int, *, stack: str | None = None,
             app: str | None = None, instance: int | None = None,
             stream: str | None = None) -> list[LogRecord]:
        """Committed records with ``id > after_id`` matching the filters, in id order
        (:meth:`read_page` without a byte budget). Raises as :meth:`read_page`."""
        return self.read_page(after_id, limit, stack=stack, app=app, instance=instance,
                              stream=stream).records

    def read_page(self, after_id: int, limit: int, *, max_bytes: int | None = None,
                  tail: int | None = None, stack: str | None = None,
                  app: str | None = None, instance: int | None = None,
                  stream: str | None = None) -> Page:
        """One page of committed records matching the filters, in id order: those with
        ``id > after_id`` (with ``tail``, only the last ``tail`` of them), at most
        ``limit`` (capped at ``READ_LIMIT_MAX``) and ``max_bytes`` of answer (see
        :func:`owner.journalread.read_page`). One read transaction. Safe from any
        thread. Raises ``BadRequest`` for a negative or non-int ``after_id``, a
        non-positive ``limit`` or ``max_bytes`` or wrongly typed filters,
        ``ShuttingDown`` for a closed journal and ``StateCorrupt`` for a damaged page or
        row it meets (a field of the wrong type, a text that is not UTF-8).
        """
        check_int("after_id", after_id)
        limit = min(check_int("limit", limit, 1), READ_LIMIT_MAX)
        if max_bytes is not None:
            check_int("max_bytes", max_bytes, 1)
        flt = Filters(None if stack is None else check_name("stack", stack),
                      None if app is None else check_name("app", app),
                      None if instance is None else check_int("instance", instance),
                      stream)
        flt.sql()  # refuses a bad stream before anything is read
        if tail is not None:
            check_int("tail", tail)
        with self._rlock:
            return read_at(self._reader(), after_id, limit, max_bytes, flt, tail,
                           self._tables.pruned, path=self._path)

    @property
    def path(self) -> str:
        return self._path


