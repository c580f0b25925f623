"""The journal's tables as its writer keeps them: record ids, each app's extents and byte
total, the apps' budgets, and pruning (the design is in :mod:`owner.journal`'s docstring).

:class:`Tables` holds the writer's connection and what it keeps in memory of those tables;
every write to journal.db is one transaction of it: a batch of lines (:meth:`Tables.write`)
or a maintenance step, such as setting budgets or forgetting sources
(:meth:`Tables.maintain`). It never takes its own ``lock``: the writer thread holds it
around a batch, a maintenance call around its step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sqlite3
import threading
from collections.abc import Callable, Mapping
from typing import Final, NamedTuple, TypeVar

from protocol.errors import StorageFailed

from .journaldb import insert_rows, open_writer, record_cost
from .journalforget import Forgetting, forget_step
from .journalpruned import Pruned, marked_instances
from .journalread import damage, refuse_damage
from .journalretention import cut_extent, load_budgets, save_budgets
from .journalvacuum import GiveBack
from .logqueue import Queued

__all__ = ["EXTENT_GAP", "STEP_BYTES", "Step", "Tables"]

_T = TypeVar("_T")
EXTENT_GAP: Final = 4096
"""Start a new extent when more than this many foreign ids lie since the app's last row."""
STEP_BYTES: Final = 8 << 20
"""What one transaction deletes at most, besides what a batch wrote: about a batch's WAL
(owner.journalckpt.BATCH_FRAMES). A budget lowered, an app or sources forgotten, go in
steps of this (owner.journal), each committed with the writer's batches and checkpoints
between them: one transaction of all of it wrote a WAL as large as what it deleted (GiBs
for a large budget, refused by the nearly full disk that had the budget lowered) and
held the writer for as long."""


class Step(NamedTuple):
    """What one step of stepwise maintenance did: records deleted, bytes of budget
    freed, and whether more is left to do."""

    records: int
    freed: int
    more: bool


@dataclasses.dataclass(slots=True)
class _App:
    """Writer bookkeeping for one (stack, app); touched only under ``Tables.lock``."""

    record_cost: int   # what each of its records costs the budget besides its data
    total: int = 0     # its records' data and costs: what its budget bounds
    first: int = 0     # open extent; first == 0 means none
    last: int = 0
    bytes: int = 0


class Tables:
    """The writer's connection to journal.db and its per-app state; see the module
    docstring. Every method but the constructor is called with ``lock`` held."""

    def __init__(self, path: str, retention: int, give_back: GiveBack) -> None:
        """Open the writer's connection to the journal at ``path`` and read its state
        back; ``retention`` is the default budget of an app, ``give_back`` is told of
        the pages pruning and forgetting free. Raises as owner.journaldb.open_writer,
        and ``StateCorrupt`` for a damaged page or row read (the connection is closed).
        """
        self._path = path
        self._retention = retention
        self._budgets: dict[tuple[str, str], int] = {}   # set per app (journalretention)
        self._give_back = give_back
        self.conn = open_writer(path)
        self.lock = threading.Lock()  # the writer connection: a batch, or a forget
        self._apps: dict[tuple[str, str], _App] = {}
        self.pruned = Pruned()   # what retention deleted, for readers behind it
        self._next_id = 1
        self.last_id = 0   # highest id committed, for last_id (set by the writer only)
        try:
            with refuse_damage(path):
                self._load_state()
                self.pruned.load(self.conn)   # what was pruned before this open
        except BaseException:
            self.conn.close()
            raise

    def _load_state(self) -> None:
        """Rebuild next id and per-app totals from the committed tables (writer side)."""
        conn = self.conn
        row = conn.execute("SELECT value FROM meta WHERE key='next_id'").fetchone()
        stored = row[0] if row and isinstance(row[0], int) else 1
        (top,) = conn.execute("SELECT COALESCE(MAX(id), 0) FROM records").fetchone()
        self._next_id = max(stored, top + 1, 1)
        self.last_id = self._next_id - 1   # as committed: the state was just read back
        self._budgets = load_budgets(conn)
        self._apps = {
            (stack, app): _App(record_cost(stack, app), total=total)
            for stack, app, total in conn.execute(
                "SELECT stack, app, SUM(bytes) FROM extents GROUP BY stack, app")
        }

    # -- batches -------------------------------------------------------------------------

    def write(self, batch: list[Queued]) -> sqlite3.Error | None:
        """Write one batch in one transaction; returns the error that lost it, if any."""
        conn = self.conn
        next_id = self._next_id
        try:
            conn.execute("BEGIN IMMEDIATE")
            touched: set[tuple[str, str]] = set()
            room = STEP_BYTES   # and what the batch adds: steady pruning keeps up
            for item in batch:
                key, cost = self._insert(conn, item)
                touched.add(key)
                room += cost
                if self._apps[key].total > self._limit(key):
                    # Pruned as the batch goes, not after it: the pages freed are
                    # reused by the rest of the batch, so journal.db never holds a
                    # batch on top of the budget (a flood's batch is 4 MiB, a budget 1).
                    self._save_extent(conn, key)
                    room -= self._prune(conn, key, room)
            for key in touched:
                self._save_extent(conn, key)
            conn.execute("UPDATE meta SET value=? WHERE key='next_id'", (self._next_id,))
            self.pruned.commit(conn)
            self.last_id = self._next_id - 1
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            self.pruned.discard()
            self._next_id = next_id
            with contextlib.suppress(sqlite3.Error):
                self._load_state()
            return exc
        return None

    def _insert(self, conn: sqlite3.Connection, item: Queued) -> tuple[tuple[str, str], int]:
        """Insert one append's lines with ids next_id.. and account them to their app;
        returns the app and what they cost its budget."""
        source, lines, flags, data_bytes = item.source, item.lines, item.flags, item.data_bytes
        first = self._next_id
        ts = float(item.ts)
        # The columns that are the same on every row are bound once per statement (?1-?6)
        # and reused by every row of a multi-row INSERT.
        head = [first, ts if math.isfinite(ts) else 0.0, source.stack, source.app,
                source.instance, source.generation, item.stream]
        insert_rows(conn, head, lines, flags)
        last = first + len(lines) - 1
        self._next_id = last + 1
        key = (source.stack, source.app)
        app = self._apps.get(key)
        if app is None:
            app = self._apps[key] = _App(record_cost=record_cost(*key))
        cost = data_bytes + len(lines) * app.record_cost
        app.total += cost
        if app.first and first - app.last <= EXTENT_GAP and \
                app.bytes < max(self._limit(key) // 32, 1):   # 32 extents to a budget
            app.last = last
            app.bytes += cost
        else:
            if app.first:
                self._save_extent(conn, key)  # closing it: the batch end saves only open ones
            app.first, app.last, app.bytes = first, last, cost
        self.pruned.wrote(key, app.first, (source.instance, item.stream), last)
        return key, cost

    def _save_extent(self, conn: sqlite3.Connection, key: tuple[str, str]) -> None:
        app = self._apps[key]
        conn.execute(
            "INSERT INTO extents(stack, app, first_id, last_id, bytes) VALUES (?,?,?,?,?)"
            " ON CONFLICT(stack, app, first_id) DO UPDATE"
            " SET last_id=excluded.last_id, bytes=excluded.bytes",
            (key[0], key[1], app.first, app.last, app.bytes))

    # -- retention -----------------------------------------------------------------------

    def _prune(self, conn: sqlite3.Connection, key: tuple[str, str], most: int) -> int:
        """Delete the app's oldest extents until its total fits the retention limit, or
        about ``most`` bytes of it went (at least one record; the rest goes in a later
        transaction). Returns the bytes deleted."""
        self._give_back.freed()
        app, limit = self._apps[key], self._limit(key)
        start = app.total
        while app.total > limit and start - app.total < most:
            oldest = conn.execute(
                "SELECT first_id, last_id, bytes FROM extents WHERE stack=? AND app=?"
                " ORDER BY first_id LIMIT 64", key).fetchall()
            if not oldest:
                app.total = 0
                break
            for first, last, nbytes in oldest:
                left = most - (start - app.total)
                if app.total <= limit or left <= 0:
                    break
                if nbytes > left or (app.total - nbytes < limit and
                                     nbytes > 2 * max(limit // 32, 1)):
                    # more than this transaction may delete, or an extent of a larger
                    # budget: cut its head, not all of it
                    gone, starts, _ = cut_extent(conn, key, first, last,
                                                 min(app.total - limit, left),
                                                 self.pruned.note_range)
                    self.pruned.moved(key, first, starts)
                    app.total -= gone
                    if first == app.first:   # the open extent now starts there (0: gone)
                        app.first, app.bytes = starts, app.bytes - gone
                        app.last = app.last if starts else 0
                    break
                self.pruned.note_extent(conn, key, first, last)
                conn.execute("DELETE FROM records WHERE id BETWEEN ? AND ? AND stack=?"
                             " AND app=?", (first, last, *key))
                conn.execute("DELETE FROM extents WHERE stack=? AND app=? AND first_id=?",
                             (*key, first))
                app.total -= nbytes
                if first == app.first:
                    app.first = app.last = app.bytes = 0
        return start - app.total

    def prune_step(self, conn: sqlite3.Connection) -> Step:
        """One step of pruning the apps over their budget (a budget lowered): at most
        about STEP_BYTES deleted."""
        room = STEP_BYTES
        for key in [k for k, a in self._apps.items() if a.total > self._limit(k)]:
            room -= self._prune(conn, key, room)
            if room <= 0:
                break
        more = any(a.total > self._limit(k) for k, a in self._apps.items())
        return Step(0, STEP_BYTES - room, more)

    def _limit(self, key: tuple[str, str]) -> int:
        """The bytes app ``key`` keeps: its own budget, or the journal's default."""
        return self._budgets.get(key, self._retention)

    def retention(self) -> tuple[int, dict[tuple[str, str], int]]:
        """The default budget, and the apps' own (journalretention)."""
        return self._retention, dict(self._budgets)

    def set_budgets(self, conn: sqlite3.Connection, named: Mapping[tuple[str, str], int],
                    keep_unnamed: bool) -> None:
        """The first step of owner.journal.Journal.set_retention (checked budgets
        ``named``): store the budgets it leaves (:meth:`prune_step` then prunes what
        they no longer keep)."""
        self._budgets = self._budgets_after(named, keep_unnamed)
        save_budgets(conn, self._budgets)

    def _budgets_after(self, named: Mapping[tuple[str, str], int], keep_unnamed: bool
                       ) -> dict[tuple[str, str], int]:
        """The budgets ``set_retention(named, keep_unnamed)`` leaves (under ``lock``):
        the named ones but the default, and with ``keep_unnamed`` the stored one of each
        app not named that has lines. The backend names only the apps of its config
        (backend.logbudgets); forgetting one that was taken out with a budget of its own
        would give its lines the default at once, pruning them before
        ``removed_app_logs_days``."""
        left = {key: n for key, n in self._budgets.items() if key not in named
                and key in self._apps and self._apps[key].total > 0} if keep_unnamed else {}
        return left | {key: n for key, n in named.items() if n != self._retention}

    # -- maintenance ---------------------------------------------------------------------

    def forget_step(self, conn: sqlite3.Connection, job: Forgetting) -> Step:
        """One step of forgetting lines of an app (owner.journalforget.forget_step), at
        most about STEP_BYTES of its records gone through; the last one, which finds
        nothing left, removes the marks of what retention pruned of them (of every
        instance of the app that has one, when ``job`` names none)."""
        self.pruned.forgot([job.key])   # its extents' summaries no longer say what is there
        self._give_back.freed()
        if job.until is None:   # lines written from now on stay
            job.until = self.last_id
        records, freed, more = forget_step(conn, job, STEP_BYTES)
        if not more:
            instances = marked_instances(conn, job.key) if job.instances is None \
                else job.instances
            self.pruned.unmark(conn, [(*job.key, i) for i in sorted(instances)])
        return Step(records, freed, more)

    def maintain(self, what: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """``work(conn)`` in one transaction of the writer's connection, between two
        batches: committed whole, or on an error not at all (StorageFailed naming
        ``what``, or StateCorrupt for damage it read: owner.journalread.damage); the
        per-app state is reloaded as committed either way."""
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            result = work(conn)
            self.pruned.commit(conn)
            return result
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            self.pruned.discard()
            raise damage(exc, self._path) or StorageFailed(
                f"journal: {what} failed: {exc}", {"path": self._path}) from None
        finally:
            with contextlib.suppress(sqlite3.Error):
                self._load_state()   # budgets and per-app totals as committed
