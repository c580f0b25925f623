"""Deleting the lines of named sources from the journal (the ``logs.forget`` method).

A source here is ``(stack, app, instance)``: every generation of one instance. That is
how a job record's output is stored (instance = the record id, generation = the
attempt), so the backend's retention can delete a pruned record's output exactly.

The records table has no index but its ids, so rows are found through the app's
*extents* (owner.journal), each an id range: the delete is a primary-key range scan of
that app's ranges, never a scan of the whole journal. Every extent that lost rows gets
its byte count recomputed from what is left of its app in it, so the per-app retention
budget keeps its meaning; an extent with no row of its app left is removed. The caller
runs this inside its write transaction: all of it happens, or none.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from .journaldb import record_cost

__all__ = ["MAX_SOURCES", "Source", "forget_sources"]

MAX_SOURCES = 1000
"""Sources per call: one transaction stays short (the journal's writer waits for it)."""

Source = tuple[str, str, int]


def forget_sources(conn: sqlite3.Connection, sources: Iterable[Source]) -> int:
    """Delete every row of ``sources`` and fix the extents they were in. Returns how many
    rows went (0 when none were left: repeating a call is harmless). Raises
    sqlite3.Error; the caller rolls its transaction back."""
    by_app: dict[tuple[str, str], set[int]] = {}
    for stack, app, instance in sources:
        by_app.setdefault((stack, app), set()).add(instance)
    deleted = 0
    for (stack, app), instances in sorted(by_app.items()):
        deleted += _forget_app(conn, stack, app, sorted(instances))
    return deleted


def _forget_app(conn: sqlite3.Connection, stack: str, app: str, instances: list[int]
                ) -> int:
    marks = ",".join("?" * len(instances))
    extents = conn.execute("SELECT first_id, last_id FROM extents WHERE stack=? AND app=?"
                           " ORDER BY first_id", (stack, app)).fetchall()
    deleted = 0
    for first, last in extents:
        cur = conn.execute(f"DELETE FROM records WHERE id BETWEEN ? AND ? AND stack=? AND"
                           f" app=? AND instance IN ({marks})",
                           (first, last, stack, app, *instances))
        if cur.rowcount <= 0:
            continue
        deleted += cur.rowcount
        rows, nbytes = conn.execute(
            "SELECT count(*), COALESCE(SUM(length(data)), 0) FROM records WHERE id BETWEEN"
            " ? AND ? AND stack=? AND app=?", (first, last, stack, app)).fetchone()
        if rows:
            conn.execute("UPDATE extents SET bytes=? WHERE stack=? AND app=? AND first_id=?",
                         (nbytes + rows * record_cost(stack, app), stack, app, first))
        else:
            conn.execute("DELETE FROM extents WHERE stack=? AND app=? AND first_id=?",
                         (stack, app, first))
    return deleted
