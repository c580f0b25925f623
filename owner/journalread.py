"""Reading the journal: pages bounded by a record count and a byte budget, and where the
last N matching records begin. Pure functions over a read connection; the caller holds
the read transaction (:class:`owner.journal.Journal` does).

Filtered by stack or app, a read scans only the id ranges that app's extents cover (an
extent may span other apps' rows, so the row filter still applies); otherwise it scans
ids upward (or, for a tail, downward) from where it starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any, Final

from protocol.errors import BadRequest, StateCorrupt

from .journaldb import damaged
from .journalpruned import Pruned, gaps

__all__ = ["RECORD_OVERHEAD", "STREAMS", "Filters", "LogRecord", "Page", "damage",
           "last_id", "read_at", "read_page", "refuse_damage", "tail_start"]

STREAMS: Final = frozenset({"stdout", "stderr"})
RECORD_OVERHEAD: Final = 96
"""Bytes a record costs on the wire besides its data and names: nine msgpack keys, the
id, timestamp, instance, generation, stream and flags (measured: 75-85)."""

_COLUMNS: Final = "id, ts, stack, app, instance, generation, stream, flags, data"
_CORRUPT: Final = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
"""SQLite's results for a file whose pages are not what it wrote."""
_UNDECODABLE: Final = "Could not decode to UTF-8"
"""How Python's sqlite3 fails a row with a TEXT value that is not UTF-8 (an
OperationalError with no SQLite result: SQLite keeps whatever bytes it is given, and
this owner writes only UTF-8)."""


class _Malformed(Exception):
    """A row that is not one this owner writes: the file was changed under it."""


def _undecodable(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and str(exc).startswith(_UNDECODABLE)


def damage(exc: sqlite3.Error, path: str) -> StateCorrupt | None:
    """The refusal of the journal at ``path`` (owner.journaldb.damaged: the way out) if
    ``exc`` says it holds what its writer did not write: a page SQLite finds corrupt,
    not a database, or a text that is not UTF-8; None for any other error."""
    if str(getattr(exc, "sqlite_errorname", "")).startswith(_CORRUPT) or _undecodable(exc):
        return damaged(path, str(exc)[:200])   # the text it could not decode may be long
    return None


@contextlib.contextmanager
def refuse_damage(path: str) -> Iterator[None]:
    """Raise StateCorrupt for damage met inside: a malformed row, or :func:`damage`.
    Any other sqlite3.Error goes through as it is."""
    try:
        yield
    except _Malformed as exc:
        raise damaged(path, str(exc)) from None
    except sqlite3.Error as exc:
        refusal = damage(exc, path)
        if refusal is None:
            raise
        raise refusal from None


@dataclasses.dataclass(frozen=True, slots=True)
class LogRecord:
    """One committed journal row."""

    id: int
    ts: float
    stack: str
    app: str
    instance: int
    generation: int
    stream: str
    flags: int
    data: bytes

    @property
    def wire_size(self) -> int:
        """About the bytes this record takes in an answer (an upper bound)."""
        return len(self.data) + len(self.stack) + len(self.app) + RECORD_OVERHEAD

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "ts": self.ts, "stack": self.stack, "app": self.app,
                "instance": self.instance, "generation": self.generation,
                "stream": self.stream, "flags": self.flags, "data": self.data}


@dataclasses.dataclass(frozen=True, slots=True)
class Page:
    """``records`` in id order; ``next`` is the ``after`` that continues where this page
    ended; ``more`` says a limit (count or bytes) cut it, so more may follow at once.
    ``pruned``: the sources log retention removed records of after the id the page was
    read from (owner.journalpruned.gaps); None when that is not known (the file read
    without the owner), and then absent from the answer."""

    records: list[LogRecord]
    next: int
    more: bool
    last_id: int
    pruned: list[dict[str, Any]] | None = None

    def to_wire(self) -> dict[str, Any]:
        """The answer of the owner's ``logs.read``."""
        wire = {"records": [r.to_wire() for r in self.records], "last_id": self.last_id,
                "next": self.next, "more": self.more}
        if self.pruned is not None:
            wire["pruned"] = self.pruned
        return wire


@dataclasses.dataclass(frozen=True, slots=True)
class Filters:
    stack: str | None = None
    app: str | None = None
    instance: int | None = None
    stream: str | None = None

    def sql(self) -> tuple[str, list[Any]]:
        """Conditions (each prefixed with AND) for the row filters. Raises BadRequest."""
        where = ""
        params: list[Any] = []
        for name, value in (("stack", self.stack), ("app", self.app),
                            ("instance", self.instance), ("stream", self.stream)):
            if value is not None:
                where += f" AND {name}=?"
                params.append(value)
        if self.stream is not None and self.stream not in STREAMS:
            raise BadRequest("stream must be 'stdout' or 'stderr'", {"field": "stream"})
        return where, params

    @property
    def by_app(self) -> bool:
        return self.stack is not None or self.app is not None


def last_id(conn: sqlite3.Connection) -> int:
    """The highest id ever committed (0 if none). A stored next id that is no number is
    read as the writer reads it at open (owner.journal): from the records."""
    row = conn.execute("SELECT value FROM meta WHERE key='next_id'").fetchone()
    if row is None or type(row[0]) is not int:
        row = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM records").fetchone()
    return max(int(row[0]) - 1, 0)


def _record(row: tuple[Any, ...]) -> LogRecord:
    """The row as a record. Raises _Malformed for a field of another type than the
    journal's writer stores (``records`` declares them; SQLite does not enforce them)."""
    rec = LogRecord(*row)
    if not (type(rec.ts) is float and type(rec.stack) is str and type(rec.app) is str
            and type(rec.instance) is int and type(rec.generation) is int
            and rec.stream in STREAMS and type(rec.flags) is int
            and type(rec.data) is bytes):
        raise _Malformed(f"record {rec.id} is malformed")
    return rec


def _undecoded(conn: sqlite3.Connection, where: str, params: list[Any]) -> _Malformed:
    """The row a read ``where`` failed on for its text (the first that matches: those
    before it were read), named by its id, which reads without decoding it."""
    (bad,) = conn.execute(f"SELECT MIN(id) FROM records WHERE {where}", params).fetchone()
    return _Malformed(f"record {bad} is malformed")


def _ranges(conn: sqlite3.Connection, after_id: int, flt: Filters,
            ) -> list[tuple[int, int | None]]:
    """Id ranges that can hold matching records above ``after_id``, ascending."""
    if not flt.by_app:
        return [(after_id + 1, None)]
    app_only = Filters(stack=flt.stack, app=flt.app)
    ewhere, eparams = app_only.sql()
    ranges = conn.execute(
        f"SELECT first_id, last_id FROM extents WHERE last_id > ?{ewhere}"
        " ORDER BY first_id", [after_id, *eparams]).fetchall()
    if any(type(lo) is not int or type(hi) is not int for lo, hi in ranges):
        raise _Malformed("an extent is malformed")
    return [(max(lo, after_id + 1), hi) for lo, hi in _merge(ranges)]


def read_page(conn: sqlite3.Connection, after_id: int, limit: int, max_bytes: int | None,
              flt: Filters) -> Page:
    """Matching records with ``id > after_id``: at most ``limit``, and no more than
    ``max_bytes`` of :attr:`LogRecord.wire_size` in all (but always at least one record,
    so a page never stalls). Rows are fetched one at a time: what is not returned is
    never held. Raises BadRequest for a bad stream filter."""
    where, params = flt.sql()
    records: list[LogRecord] = []
    used = 0
    for lo, hi in _ranges(conn, after_id, flt):
        upper = "" if hi is None else f" AND id <= {int(hi)}"
        cur = conn.execute(f"SELECT {_COLUMNS} FROM records WHERE id >= ?{upper}{where}"
                           " ORDER BY id LIMIT ?", [lo, *params, limit - len(records)])
        try:
            for row in cur:
                rec = _record(row)
                if max_bytes is not None and records and used + rec.wire_size > max_bytes:
                    return Page(records, records[-1].id, True, last_id(conn))
                records.append(rec)
                used += rec.wire_size
        except sqlite3.OperationalError as exc:
            if not _undecodable(exc):
                raise
            start = max(lo, records[-1].id + 1) if records else lo
            raise _undecoded(conn, f"id >= ?{upper}{where}", [start, *params]) from None
        finally:
            cur.close()
        if len(records) >= limit:
            return Page(records, records[-1].id, True, last_id(conn))
    return Page(records, records[-1].id if records else after_id, False, last_id(conn))


def read_at(conn: sqlite3.Connection, after_id: int, limit: int, max_bytes: int | None,
            flt: Filters, tail: int | None = None, pruned: Pruned | None = None, *,
            path: str) -> Page:
    """:func:`read_page` in one read transaction, after :func:`tail_start` with
    ``tail``: the owner's ``logs.read``, and the CLI's read of the file while tenure is
    not running. With ``pruned`` (the owner's), the page's ``pruned`` names the sources
    retention removed records of after the id it was read from, as of the same snapshot.
    The caller serialises the use of ``conn``. Raises BadRequest; StateCorrupt naming
    ``path`` and the way out (owner.journaldb.damaged) for a damaged file or row, which
    fails every read that meets it, not only this one; sqlite3.Error."""
    with refuse_damage(path):
        return _read_at(conn, after_id, limit, max_bytes, flt, tail, pruned)


def _read_at(conn: sqlite3.Connection, after_id: int, limit: int, max_bytes: int | None,
             flt: Filters, tail: int | None, pruned: Pruned | None) -> Page:
    conn.execute("BEGIN")
    try:
        # a tail only raises after_id: marks at or below it are never named
        marks = None if pruned is None else pruned.as_of(conn, flt, after_id)
        if tail is not None:
            after_id = max(after_id, tail_start(conn, tail, flt))
        page = read_page(conn, after_id, limit, max_bytes, flt)
        return page if marks is None else dataclasses.replace(page,
                                                              pruned=gaps(marks, after_id))
    finally:
        conn.execute("COMMIT")


def tail_start(conn: sqlite3.Connection, n: int, flt: Filters) -> int:
    """The ``after`` id from which the last ``n`` matching records follow (0 when fewer
    than ``n`` exist). Counts, never loads, the records it skips."""
    if n <= 0:
        return last_id(conn)
    where, params = flt.sql()
    for lo, hi in reversed(_ranges(conn, 0, flt)):
        upper = "" if hi is None else f" AND id <= {int(hi)}"
        if hi is not None:
            (count,) = conn.execute(f"SELECT COUNT(*) FROM records WHERE id >= ?{upper}"
                                    f"{where}", [lo, *params]).fetchone()
            if count < n:
                n -= count
                continue
        row = conn.execute(f"SELECT id FROM records WHERE id >= ?{upper}{where}"
                           " ORDER BY id DESC LIMIT 1 OFFSET ?", [lo, *params, n - 1]
                           ).fetchone()
        return 0 if row is None else int(row[0]) - 1
    return 0


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of id ranges sorted by start (extents of several apps may overlap)."""
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out
