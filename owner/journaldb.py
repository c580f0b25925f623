"""The journal's file: ``journal.db`` opened privately (0600, no symlinks), its schema
created and checked, and the multi-row INSERTs the writer commits its batches with
(:mod:`owner.journal` is the store that uses them).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Callable
from typing import Final

from protocol.durable import limit_cache, refuse_unprivate
from protocol.errors import StateCorrupt, UnsafePath
from protocol.storage import storage_failure

from .journalckpt import KEEP_BYTES
from .journalvacuum import start_incremental

__all__ = ["COLS", "FORMAT_VERSION", "META_PREFIXED", "MULTI_ROWS", "RECORD_COST",
           "check_schema", "connect", "damaged", "insert_rows", "on_disk", "open_private",
           "open_writer", "prefixed", "record_cost"]

DAMAGED: Final = ("it holds only the apps' logs: set it aside with its -wal and -shm while "
                  "no owner runs, and the owner starts a new one (docs/state.md, \"A "
                  "damaged journal.db\")")
"""The way out that every refusal of a journal tenure cannot read ends with."""

FORMAT_VERSION: Final = 1
_SCHEMA: Final = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
    "CREATE TABLE records (id INTEGER PRIMARY KEY, ts REAL NOT NULL, stack TEXT NOT NULL,"
    " app TEXT NOT NULL, instance INTEGER NOT NULL, generation INTEGER NOT NULL,"
    " stream TEXT NOT NULL, flags INTEGER NOT NULL, data BLOB NOT NULL)",
    "CREATE TABLE extents (stack TEXT NOT NULL, app TEXT NOT NULL, first_id INTEGER NOT NULL,"
    " last_id INTEGER NOT NULL, bytes INTEGER NOT NULL, PRIMARY KEY (stack, app, first_id))"
    " WITHOUT ROWID",
)
META_PREFIXED: Final = "key >= ? AND key < ?"
"""The ``meta`` rows whose keys begin with a prefix, bound to :func:`prefixed`."""


def prefixed(prefix: str) -> tuple[str, str]:
    """The two bounds :data:`META_PREFIXED` takes for ``prefix`` (it ends in '/', and '0'
    comes right after '/')."""
    return prefix, prefix[:-1] + "0"


def on_disk(path: str | os.PathLike[str]) -> int:
    """Bytes the journal at ``path`` takes on disk: the database and its WAL. Raises
    nothing."""
    total = 0
    for p in (os.fspath(path), os.fspath(path) + "-wal"):
        with contextlib.suppress(OSError):
            total += os.stat(p).st_size
    return total


COLS: Final = "ts, stack, app, instance, generation, stream, data, flags"
RECORD_COST: Final = 24
"""Bytes a record takes in journal.db besides its data and its stack's and app's names
(its id, time, instance, generation, stream, flags, and the b-tree's own): measured
22-26 for lines of 1 to 120 bytes. Retention counts them (:func:`record_cost`): a
budget of 1-byte lines kept by their data alone took ~40 times the budget on disk."""
MULTI_ROWS: Final = 256
"""Rows per multi-row INSERT: fewer statement steps per row is ~1.5x the throughput. A
row binds one parameter (its data; two if flags are set), far below SQLite's 32766."""


def record_cost(stack: str, app: str) -> int:
    """What one record of ``stack``/``app`` costs a retention budget besides its data."""
    return RECORD_COST + len(stack.encode()) + len(app.encode())


def open_private(path: str) -> None:
    """Create ``path`` 0600 if missing; refuse symlinks (its sidecars' too), non-regular
    files, and a journal of another user or open to others: it holds what apps wrote
    (their secrets among it, often). Refused as owner.db is (protocol.durable), changing
    nothing: whoever changed it may have read it, and only the operator knows why.

    Raises ``UnsafePath`` naming the path.
    """
    for side in (path, path + "-wal", path + "-shm", path + "-journal"):
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISLNK(os.lstat(side).st_mode):
                raise UnsafePath(f"journal path {side} is a symlink", {"path": side})
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise UnsafePath(f"cannot open journal {path}: {exc.strerror}",
                         {"path": path}) from None
    try:
        refuse_unprivate(path, os.fstat(fd))
    finally:
        os.close(fd)


def damaged(path: str, what: str, **data: object) -> StateCorrupt:
    """The refusal of the journal at ``path``, saying ``what`` is wrong and the way out."""
    return StateCorrupt(f"{path} is not a journal this owner can read ({what}); {DAMAGED}",
                        {"path": path, **data})


def check_schema(conn: sqlite3.Connection, path: str) -> bool:
    """True if the database is empty (needs creating); False for a journal of this
    format. Raises ``StateCorrupt`` (not a journal, another format), sqlite3.Error."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        return True
    if "meta" not in tables:
        raise damaged(path, "no meta table")
    row = conn.execute("SELECT value FROM meta WHERE key='format_version'").fetchone()
    version = row[0] if row else None
    if type(version) is not int or version < 1:
        raise damaged(path, f"format {str(version)[:50]!r}")
    if version != FORMAT_VERSION:   # not damaged: a newer tenure's, most likely
        raise StateCorrupt(f"{path} is a journal of format {version!r}; this owner reads "
                           f"{FORMAT_VERSION}: run the tenure that wrote it, and keep the "
                           "file", {"path": path, "format_version": version})
    if not {"records", "extents"} <= tables:
        raise damaged(path, "tables are missing")
    return False


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                           cached_statements=32)
    conn.execute("PRAGMA busy_timeout=5000")
    limit_cache(conn)
    return conn


def open_writer(path: str) -> sqlite3.Connection:
    """The writer's connection to the journal at ``path``, created (0600: open_private
    first) when empty: the format is checked before anything can write to the file.
    Raises StateCorrupt (not a journal, another format, unreadable) or StorageFailed
    (the disk failed: full, read-only, I/O error)."""
    try:
        conn = connect(path)
    except sqlite3.Error as exc:
        raise damaged(path, str(exc)) from None
    try:
        fresh = check_schema(conn, path)
        if fresh:   # before the journal mode and the first table, or SQLite ignores it
            start_incremental(conn)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer's job
        # The commit that starts the WAL over cuts the file back (owner.journalckpt).
        conn.execute(f"PRAGMA journal_size_limit={KEEP_BYTES}")
        if fresh:
            _create(conn, path)
    except sqlite3.Error as exc:
        conn.close()
        # a full or failing disk, not a damaged journal
        raise storage_failure(exc, f"opening the journal {path}", path) or \
            damaged(path, str(exc)) from None
    except BaseException:
        conn.close()
        raise
    return conn


def _create(conn: sqlite3.Connection, path: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not check_schema(conn, path):  # created meanwhile by another opener
            conn.execute("ROLLBACK")
            return
        for ddl in _SCHEMA:
            conn.execute(ddl)
        conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)",
                         [("format_version", FORMAT_VERSION), ("next_id", 1)])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _values(flagged: bool) -> Callable[[int], str]:
    """Row ``i`` of a multi-row INSERT: ?1-?6 are the columns every row shares, then
    the row's data (and flags if ``flagged``; else 0)."""
    if flagged:
        return lambda i: f"(?1,?2,?3,?4,?5,?6,?{7 + 2 * i},?{8 + 2 * i})"
    return lambda i: f"(?1,?2,?3,?4,?5,?6,?{7 + i},0)"


_ROWS: Final = (MULTI_ROWS, 32, 4, 1)
"""Rows per statement, largest first: what is left after the MULTI_ROWS statements
takes at most a few more steps (1-row statements alone would be one step per row)."""
_INSERT_ROWS: Final = {
    (rows, flagged): f"INSERT INTO records({COLS}) VALUES "
    + ",".join(map(_values(flagged), range(rows)))
    for rows in _ROWS for flagged in (False, True)
}
"""Constant text: SQLite prepares each statement once (the connection caches them)."""
_INSERT_FIRST: Final = {
    flagged: f"INSERT INTO records(id, {COLS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,"
    + ("?9)" if flagged else "0)")
    for flagged in (False, True)
}


def insert_rows(conn: sqlite3.Connection, head: list[object],
                 lines: list[bytes | bytearray], flags: list[int] | None) -> None:
    """Insert ``lines`` (``flags``: theirs, or None for all 0) as rows sharing ``head``
    (first id, ts, stack, app, instance, generation, stream): the first row with its id
    explicit, the others with automatic (consecutive) ids after it."""
    flagged = flags is not None
    values: list[object]
    if flags is None:
        conn.execute(_INSERT_FIRST[False], [*head, lines[0]])
        values, per_row = lines, 1  # type: ignore[assignment]
    else:
        conn.execute(_INSERT_FIRST[True], [*head, lines[0], flags[0]])
        values, per_row = [None] * (2 * len(lines)), 2
        values[::2] = lines
        values[1::2] = flags
    shared = head[1:]
    start, end = per_row, len(values)
    for rows in _ROWS:
        step = rows * per_row
        stop = end - (end - start) % step
        if stop > start:
            conn.executemany(_INSERT_ROWS[rows, flagged],
                             [shared + values[i:i + step] for i in range(start, stop, step)])
            start = stop
