"""Deleting the lines of named sources from the journal (the ``logs.forget`` method), and
of whole apps (``logs.forget_apps``).

A source here is ``(stack, app, instance)``: every generation of one instance. That is
how a job record's output is stored (instance = the record id, generation = the
attempt), so the backend's retention can delete a pruned record's output exactly.

The records table has no index but its ids, so rows are found through the app's
*extents* (owner.journal), each an id range: the delete is a primary-key range scan of
that app's ranges, never a scan of the whole journal. It goes in steps
(:func:`forget_step`), each one transaction of the caller's (owner.journal), going
through the app's extents in id order from where the step before stopped, and through
at most about a given number of bytes of the app's records: a job's output is bounded
only by its app's budget (GiBs), and one transaction of all of it wrote a WAL as large
as what it deleted and held the writer for as long. Every extent a step went through to
its end gets its byte count recomputed from what is left of its app in it, so the
per-app retention budget keeps its meaning; one with no row of its app left is removed.
"""

from __future__ import annotations

import dataclasses
import sqlite3

from .journaldb import record_cost

__all__ = ["APPS_PAGE", "MAX_APPS", "MAX_SOURCES", "AppLines", "Forgetting", "Source",
           "apps_kept", "forget_step"]

MAX_SOURCES = 1000
"""Sources per ``logs.forget`` call; those of one app are deleted together, in
transactions of at most owner.journaltables.STEP_BYTES each."""

MAX_APPS = 100
"""Apps per ``logs.forget_apps`` call; each is deleted in transactions of its own, of at
most owner.journaltables.STEP_BYTES each."""

APPS_PAGE = 2000
"""Apps per ``logs.apps`` answer: 2,000 of the longest names (128 characters each) fit
one frame with room to spare."""

EXTENTS_A_STEP = 64
"""Extents a step reads at most (their first and last ids), whatever their size."""

Source = tuple[str, str, int]
AppLines = tuple[str, str, int, float | None]   # stack, app, bytes, time of its last line


@dataclasses.dataclass(slots=True)
class Forgetting:
    """The lines of one app being forgotten step by step: those of ``instances`` (None:
    of every instance) with an id up to ``until`` (None until the first step sets it:
    lines written after the forget began stay); the steps so far went through the
    app's records up to id ``after``."""

    key: tuple[str, str]
    instances: frozenset[int] | None
    until: int | None = None
    after: int = 0

    def what(self) -> str:
        """What the forget is, as an error names it: the source (or the app)."""
        name = f"{self.key[0]}/{self.key[1]}"
        if self.instances is None:
            return f"forgetting {name}"
        if len(self.instances) == 1:
            return f"forgetting {name}/{min(self.instances)}"
        return (f"forgetting {len(self.instances)} instances of {name}, "
                f"{name}/{min(self.instances)} to {name}/{max(self.instances)}")


def forget_step(conn: sqlite3.Connection, job: Forgetting, most: int
                ) -> tuple[int, int, bool]:
    """One step of ``job`` in the caller's transaction: delete its lines in the app's
    extents after ``job.after``, in id order, going through about ``most`` bytes of the
    app's records (its own lines and those it keeps alike, as the budget counts them:
    owner.journaldb.record_cost), at least one, and move ``job.after`` past them.
    Returns the records deleted, the bytes of budget they took, and whether any of the
    app's records up to ``job.until`` is left to go through. Raises sqlite3.Error; the
    caller rolls back (``job`` must not be stepped on then)."""
    key, until = job.key, job.until if job.until is not None else 0
    records = freed = 0
    room = most
    for first, last in conn.execute(
            "SELECT first_id, last_id FROM extents WHERE stack=? AND app=? AND last_id > ?"
            " AND first_id <= ? ORDER BY first_id LIMIT ?",
            (*key, job.after, until, EXTENTS_A_STEP)).fetchall():
        rows, gone, went, job.after = _forget_in(conn, job, first, last, room)
        records, freed, room = records + rows, freed + gone, room - went
        if room <= 0:
            break
    more = job.after < until and conn.execute(
        "SELECT 1 FROM extents WHERE stack=? AND app=? AND last_id > ? AND first_id <= ?"
        " LIMIT 1", (*key, job.after, until)).fetchone() is not None
    return records, freed, more


def _forget_in(conn: sqlite3.Connection, job: Forgetting, first: int, last: int, room: int
               ) -> tuple[int, int, int, int]:
    """Delete ``job``'s lines in the app's extent ``first``..``last``, from the id after
    ``job.after`` on, going through at most about ``room`` bytes of the app's records.
    Returns the records deleted, their bytes, the bytes gone through and the last id
    gone through."""
    key, instances = job.key, job.instances
    start, stop = max(first, job.after + 1), min(last, job.until or 0)
    each = record_cost(*key)
    went = gone = rows = 0
    cut = stop
    for rid, instance, n in conn.execute(
            "SELECT id, instance, length(data) FROM records WHERE id BETWEEN ? AND ? AND "
            "stack=? AND app=? ORDER BY id", (start, stop, *key)):
        if went >= room:
            cut = rid - 1
            break
        went += n + each
        if instances is None or instance in instances:
            gone, rows = gone + n + each, rows + 1
    if rows:
        which = "" if instances is None else \
            f" AND instance IN ({','.join('?' * len(instances))})"
        conn.execute(f"DELETE FROM records WHERE id BETWEEN ? AND ? AND stack=? AND app=?"
                     f"{which}", (start, cut, *key, *sorted(instances or ())))
    if cut == last and (rows or start > first):
        _recount(conn, key, first, last)   # every step through it is done
    elif rows:
        conn.execute("UPDATE extents SET bytes=bytes-? WHERE stack=? AND app=? AND "
                     "first_id=?", (gone, *key, first))
    return rows, gone, went, cut


def _recount(conn: sqlite3.Connection, key: tuple[str, str], first: int, last: int
             ) -> None:
    """Make the extent's bytes what is left of its app in it, or remove it if nothing
    is."""
    rows, nbytes = conn.execute(
        "SELECT count(*), COALESCE(SUM(length(data)), 0) FROM records WHERE id BETWEEN"
        " ? AND ? AND stack=? AND app=?", (first, last, *key)).fetchone()
    if rows:
        conn.execute("UPDATE extents SET bytes=? WHERE stack=? AND app=? AND first_id=?",
                     (nbytes + rows * record_cost(*key), *key, first))
    else:
        conn.execute("DELETE FROM extents WHERE stack=? AND app=? AND first_id=?",
                     (*key, first))


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
