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
from .journalpruned import marked_instances

__all__ = ["APPS_PAGE", "MAX_APPS", "MAX_SOURCES", "AppLines", "Source", "app_sources", "apps_kept",
           "forget_sources"]

MAX_SOURCES = 1000
"""Sources per call: one transaction stays short (the journal's writer waits for it)."""

MAX_APPS = 100
"""Apps per ``logs.forget_apps`` call; each is deleted in transactions of its own, of at
most owner.journaltables.STEP_BYTES each."""

APPS_PAGE = 2000
"""Apps per ``logs.apps`` answer: 2,000 of the longest names (128 characters each) fit
one frame with room to spare."""

Source = tuple[str, str, int]
AppLines = tuple[str, str, int, float | None]   # stack, app, bytes, time of its last line


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


def app_sources(conn: sqlite3.Connection, apps: Iterable[tuple[str, str]]) -> list[Source]:
    """Every source of ``apps``: each instance with a line in one of the app's extents,
    and each with a mark of what retention pruned of it (owner.journalpruned), whose
    mark goes with the app. Raises sqlite3.Error."""
    out: set[Source] = set()
    for stack, app in apps:
        for first, last in conn.execute("SELECT first_id, last_id FROM extents WHERE "
                                        "stack=? AND app=?", (stack, app)).fetchall():
            out.update((stack, app, i) for (i,) in conn.execute(
                "SELECT DISTINCT instance FROM records WHERE id BETWEEN ? AND ? AND "
                "stack=? AND app=?", (first, last, stack, app)))
        out.update((stack, app, i) for i in marked_instances(conn, (stack, app)))
    return sorted(out)


def apps_kept(conn: sqlite3.Connection, after: tuple[str, str] | None = None,
              limit: int = APPS_PAGE) -> list[AppLines]:
    """Each app with lines in the journal, in (stack, app) order after ``after``, at most
    ``limit``: its bytes (as its budget counts them) and the time of its newest line
    (None when its newest extent has no row left). Raises sqlite3.Error."""
    out = []
    stack0, app0 = after if after is not None else ("", "")
    for stack, app, nbytes, first, last in conn.execute(
            "SELECT stack, app, SUM(bytes), MAX(first_id), MAX(last_id) FROM extents "
            "WHERE stack > ? OR (stack = ? AND app > ?) GROUP BY stack, app "
            "ORDER BY stack, app LIMIT ?", (stack0, stack0, app0, limit)).fetchall():
        row = conn.execute("SELECT ts FROM records WHERE id BETWEEN ? AND ? AND stack=? "
                           "AND app=? ORDER BY id DESC LIMIT 1",
                           (first, last, stack, app)).fetchone()
        out.append((stack, app, int(nbytes), None if row is None else float(row[0])))
    return out
