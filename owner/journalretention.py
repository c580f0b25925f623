"""How much of each app's output the journal keeps (the ``logs.retention`` method).

Every app keeps the journal's default (64 MiB, pruning the oldest) unless the backend
set its own budget; an app the backend no longer names keeps the one it had while it has
lines (owner.journal.Journal.set_retention). Budgets live in the journal's ``meta``
table as ``retention/STACK/APP`` keys, in the same transaction as whatever pruning a
smaller budget takes, so an
owner restarted (upgraded, recovered) prunes by them from its first write, before any
backend has spoken to it. An older owner ignores the keys (it reads only the format
version and the next id) and keeps its own default.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping

from .journaldb import META_PREFIXED, prefixed, record_cost

__all__ = ["MAX_RETENTION", "MIN_RETENTION", "PREFIX", "cut_extent", "load_budgets",
           "save_budgets"]

PREFIX = "retention/"
MIN_RETENTION = 1 << 20    # below it an app could not keep a page of its own output
MAX_RETENTION = 1 << 40

AppKey = tuple[str, str]


def load_budgets(conn: sqlite3.Connection) -> dict[AppKey, int]:
    """The budgets stored in ``meta``; a malformed entry is ignored (the default applies,
    which is what an owner without budgets does). Raises sqlite3.Error."""
    out: dict[AppKey, int] = {}
    for key, value in conn.execute(
            f"SELECT key, value FROM meta WHERE {META_PREFIXED}", prefixed(PREFIX)):
        stack, _, app = key[len(PREFIX):].partition("/")
        if stack and app and "/" not in app and isinstance(value, int) \
                and MIN_RETENTION <= value <= MAX_RETENTION:
            out[(stack, app)] = value
    return out


def save_budgets(conn: sqlite3.Connection, budgets: Mapping[AppKey, int]) -> None:
    """Make ``meta`` hold exactly ``budgets``, inside the caller's transaction. Raises
    sqlite3.Error; the caller rolls back."""
    conn.execute(f"DELETE FROM meta WHERE {META_PREFIXED}", prefixed(PREFIX))
    conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)",
                     [(f"{PREFIX}{stack}/{app}", n)
                      for (stack, app), n in sorted(budgets.items())])


def cut_extent(conn: sqlite3.Connection, key: AppKey, first: int, last: int,
               excess: int, before_delete: Callable[[sqlite3.Connection, AppKey, int, int],
                                                     None] | None = None) -> tuple[int, int, int]:
    """Delete the oldest records of app ``key`` in its extent ``first``..``last`` until at
    least ``excess`` bytes of budget went (their data and their records' costs,
    owner.journaldb.record_cost), or all of it, and make the extent start after them.
    Pruning deletes whole extents, each 1/32 of the app's budget; after a budget shrank,
    an extent sized for the old one may hold more than the new budget, and deleting it
    whole would leave the app with nothing. Returns the bytes deleted, the extent's
    new first id (0 when none of it is left) and how many records went.
    ``before_delete(conn, key, first, cut)`` is told the records about to go
    (owner.journalpruned.Pruned.note). Raises
    sqlite3.Error; the caller rolls back."""
    gone, cut, each, rows = 0, first - 1, record_cost(*key), 0
    for rid, n in conn.execute(
            "SELECT id, length(data) FROM records WHERE id BETWEEN ? AND ? AND stack=? "
            "AND app=? ORDER BY id", (first, last, *key)):
        if gone >= excess:
            break
        gone, cut, rows = gone + n + each, rid, rows + 1
    if before_delete is not None and cut >= first:
        before_delete(conn, key, first, cut)
    conn.execute("DELETE FROM records WHERE id BETWEEN ? AND ? AND stack=? AND app=?",
                 (first, cut, *key))
    if cut >= last:
        conn.execute("DELETE FROM extents WHERE stack=? AND app=? AND first_id=?",
                     (*key, first))
        return gone, 0, rows
    conn.execute("UPDATE extents SET first_id=?, bytes=bytes-? WHERE stack=? AND app=? "
                 "AND first_id=?", (cut + 1, gone, *key, first))
    return gone, cut + 1, rows
