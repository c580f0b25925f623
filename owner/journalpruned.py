"""What log retention removed of each source: the ``pruned`` of the owner's ``logs.read``.

Record ids are per journal, shared by every source, so a reader that asked for a
source's records after id A and got the next one at id B cannot tell from the ids alone
whether retention pruned records of that source between them: other apps' records fill
the ids between. The journal can. Pruning deletes an app's oldest records first
(owner.journal), so for each source ``(stack, app, instance, stream)`` the highest id
retention deleted, P, says that every record of the source up to P is gone and none
above it went by retention. A read after A < P missed some of them (record P at least):
the answer says so per source, ``{stack, app, instance, stream, after: A, last_id: P}``.

Kept in memory and in the journal's ``meta`` table (``pruned/STACK/APP/INSTANCE/
STREAM`` -> the id), written in the transaction that pruned: an owner started on the
journal (an upgrade, a reboot) says what was pruned before it from its first read. An
owner that predates the rows ignores them and does not add to them; marks then say less
than what went, never something false. A reader's snapshot and the marks it is given
agree: the writer commits a transaction that pruned and publishes its marks under one
lock, and a reader starts its snapshot and copies the marks under the same lock
(:meth:`as_of`).
Pruning an extent written since the journal opened reads none of its rows: the writer
keeps, per extent, each source's highest id in it (:meth:`Pruned.wrote`); older extents,
and the head of one that is cut, are read with one grouped query.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from protocol.schema import is_count

from .journaldb import META_PREFIXED, prefixed

if TYPE_CHECKING:
    from .journalread import Filters

__all__ = ["MAX_PER_APP", "MAX_SUMMARIES", "Mark", "Pruned", "gaps", "marked_instances"]

PREFIX: Final = "pruned/"
MAX_PER_APP: Final = 1024
"""Sources remembered per app (a job template has an instance per job): beyond it, those
pruned longest ago are forgotten, and a reader still behind them is told nothing."""

MAX_SUMMARIES: Final = 4096
"""Extents whose sources' highest ids are kept in memory (Pruned.wrote)."""

AppKey = tuple[str, str]
SourceKey = tuple[int, str]   # instance, stream
Mark = tuple[str, str, int, str, int]   # stack, app, instance, stream, last id pruned


class Pruned:
    """Per source, the highest id log retention deleted (see the module docstring).
    Every method but :meth:`as_of` is called by the journal's writer only (it holds the
    writer's lock): the per-extent summaries and the staged marks are its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._through: dict[AppKey, dict[SourceKey, int]] = {}
        self._staged: dict[AppKey, dict[SourceKey, int]] = {}
        self._unmarked: set[tuple[AppKey, int]] = set()   # forgotten: (app, instance)
        self._extents: dict[tuple[AppKey, int], dict[SourceKey, int]] = {}
        """Per extent (app, first id) written since the journal opened: each source's
        highest id in it, so pruning a whole extent needs no scan of its rows."""

    def wrote(self, app: AppKey, extent: int, source: SourceKey, last: int) -> None:
        """Records of ``source`` up to id ``last`` went into the extent of ``app`` that
        begins at id ``extent``. At most MAX_SUMMARIES extents are summarised: a quiet
        app between chatty ones starts an extent per append, and the owner's memory must
        not grow with them; the oldest summary goes first (its rows are read instead)."""
        summary = self._extents.get((app, extent))
        if summary is None:
            if len(self._extents) >= MAX_SUMMARIES:
                del self._extents[next(iter(self._extents))]
            summary = self._extents[app, extent] = {}
        summary[source] = last

    def note_extent(self, conn: sqlite3.Connection, app: AppKey, first: int, last: int
                    ) -> None:
        """Before the writer's open transaction deletes the extent ``first``..``last``
        of ``app`` whole: stage the highest id each of its sources loses there, from
        the extent's summary (or its rows, for an extent written before the journal
        opened). Raises sqlite3.Error; the caller rolls back and calls :meth:`discard`."""
        summary = self._extents.pop((app, first), None)
        if summary is None:
            self.note_range(conn, app, first, last)
        else:
            self._stage(app, summary.items())

    def note_range(self, conn: sqlite3.Connection, app: AppKey, first: int, last: int
                   ) -> None:
        """:meth:`note_extent` for the records ``first``..``last`` of ``app`` read from
        the table (the head of an extent that is cut). Raises sqlite3.Error."""
        self._stage(app, (((instance, stream), top) for instance, stream, top in conn.execute(
            "SELECT instance, stream, MAX(id) FROM records WHERE id BETWEEN ? AND ?"
            " AND stack=? AND app=? GROUP BY instance, stream", (first, last, *app))))

    def moved(self, app: AppKey, first: int, starts: int) -> None:
        """The extent of ``app`` at ``first`` now begins at ``starts`` (0: it is gone).
        Its summary still holds: a source's highest id in what is left is the same, or
        already pruned (staging it again changes nothing)."""
        summary = self._extents.pop((app, first), None)
        if summary is not None and starts:
            self._extents[app, starts] = summary

    def forgot(self, apps: Iterable[AppKey]) -> None:
        """Sources of ``apps`` were deleted (owner.journalforget): their extents'
        summaries may name what retention will never delete; read the rows instead."""
        gone = set(apps)
        for key in [k for k in self._extents if k[0] in gone]:
            del self._extents[key]

    def unmark(self, conn: sqlite3.Connection, sources: Iterable[tuple[str, str, int]]
               ) -> None:
        """Every line of ``sources`` (stack, app, instance) is being deleted
        (owner.journalforget, in the writer's open transaction): their marks go with
        them, from ``meta`` now and from memory at :meth:`commit`. Raises sqlite3.Error."""
        for stack, app, instance in sources:
            conn.execute(f"DELETE FROM meta WHERE {META_PREFIXED}",
                         prefixed(_mark_key((stack, app), instance, "")))
            self._unmarked.add(((stack, app), instance))

    def _stage(self, app: AppKey, marks: Iterable[tuple[SourceKey, int]]) -> None:
        staged = self._staged.setdefault(app, {})
        for source, top in marks:
            staged[source] = max(staged.get(source, 0), top)

    def commit(self, conn: sqlite3.Connection) -> None:
        """Write what the writer's transaction staged into ``meta``, COMMIT it and
        publish the marks, as one step for readers (:meth:`as_of`). Raises sqlite3.Error
        (nothing is published; the caller rolls back and calls :meth:`discard`)."""
        if not self._staged and not self._unmarked:
            conn.execute("COMMIT")
            return
        with self._lock:
            through = {app: {s: top for s, top in self._through.get(app, {}).items()
                             if (app, s[0]) not in self._unmarked}
                       for app in {*self._staged, *(app for app, _ in self._unmarked)}}
            for app, marks in self._staged.items():
                kept = through[app] = _kept({**through[app], **marks})   # ids only grow
                _save(conn, app, {s: kept[s] for s in marks if s in kept},
                      set(self._through.get(app, {})) - set(kept))
            conn.execute("COMMIT")
            self._through.update(through)
        self._staged.clear()
        self._unmarked.clear()

    def load(self, conn: sqlite3.Connection) -> None:
        """The marks stored in ``meta`` (at open); a malformed row is ignored, as an
        older owner's answer says less. Raises sqlite3.Error."""
        through: dict[AppKey, dict[SourceKey, int]] = {}
        for key, value in conn.execute(f"SELECT key, value FROM meta WHERE {META_PREFIXED}",
                                       prefixed(PREFIX)):
            mark = _parse(key[len(PREFIX):], value)
            if mark is not None:
                app, source, top = mark
                through.setdefault(app, {})[source] = top
        with self._lock:
            self._through = {app: _kept(marks) for app, marks in through.items()}

    def discard(self) -> None:
        """The writer's transaction was rolled back: forget what it staged, and the
        summaries (they may name ids the next batch reuses; rows are read instead)."""
        self._staged.clear()
        self._unmarked.clear()
        self._extents.clear()

    def as_of(self, conn: sqlite3.Connection, flt: Filters, above: int) -> list[Mark]:
        """Start ``conn``'s read snapshot (it is inside BEGIN) and return, as of it, the
        marks above id ``above`` of the sources ``flt`` selects: ``(stack, app,
        instance, stream, last_id)``. Raises sqlite3.Error."""
        with self._lock:
            conn.execute("SELECT value FROM meta WHERE key='next_id'").fetchone()
            return [(stack, app, instance, stream, top)
                    for (stack, app), marks in self._through.items()
                    if flt.stack in (None, stack) and flt.app in (None, app)
                    for (instance, stream), top in marks.items()
                    if top > above and flt.instance in (None, instance)
                    and flt.stream in (None, stream)]


def _parse(key: str, value: object) -> tuple[AppKey, SourceKey, int] | None:
    """``STACK/APP/INSTANCE/STREAM`` -> the id, or None for a row that is not one (an
    instance of ASCII digits only, a known stream, a positive id)."""
    parts = key.split("/")
    if len(parts) != 4 or not all(parts[:2]) or parts[3] not in ("stdout", "stderr") \
            or not (parts[2].isascii() and parts[2].isdigit() and len(parts[2]) <= 19) \
            or not is_count(value, 1):
        return None
    return (parts[0], parts[1]), (int(parts[2]), parts[3]), value


def _kept(marks: dict[SourceKey, int]) -> dict[SourceKey, int]:
    """At most MAX_PER_APP marks of one app: past it, the newest half."""
    if len(marks) <= MAX_PER_APP:
        return marks
    return dict(sorted(marks.items(), key=lambda kv: kv[1])[-MAX_PER_APP // 2:])


def _save(conn: sqlite3.Connection, app: AppKey, marks: dict[SourceKey, int],
          dropped: set[SourceKey]) -> None:
    """Store ``marks`` of ``app`` (a higher id wins) and delete the ``dropped`` ones,
    inside the caller's transaction. Raises sqlite3.Error."""
    conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO "
                     "UPDATE SET value = max(value, excluded.value)",
                     [(_mark_key(app, *source), top) for source, top in marks.items()])
    conn.executemany("DELETE FROM meta WHERE key = ?",
                     [(_mark_key(app, *source),) for source in dropped])


def marked_instances(conn: sqlite3.Connection, app: AppKey) -> set[int]:
    """The instances of ``app`` that have a mark stored in ``meta`` (an instance whose
    every line retention pruned has its mark alone). Raises sqlite3.Error."""
    prefix = f"{PREFIX}{app[0]}/{app[1]}/"
    found = set()
    for (key,) in conn.execute(f"SELECT key FROM meta WHERE {META_PREFIXED}",
                               prefixed(prefix)):
        instance = key[len(prefix):].partition("/")[0]
        if instance.isdigit():
            found.add(int(instance))
    return found


def _mark_key(app: AppKey, instance: int, stream: str) -> str:
    """``pruned/STACK/APP/INSTANCE/STREAM``; with no stream, the prefix of an instance's."""
    return f"{PREFIX}{app[0]}/{app[1]}/{instance}/{stream}"


def gaps(marks: list[Mark], after: int) -> list[dict[str, Any]]:
    """The sources of ``marks`` that retention pruned records of above ``after``, as
    ``logs.read`` answers them (sorted by source)."""
    return [{"stack": st, "app": app, "instance": inst, "stream": stream, "after": after,
             "last_id": top} for st, app, inst, stream, top in sorted(marks) if top > after]
