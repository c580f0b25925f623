"""owner.db: the current epoch and grant, every launch ever made, stack intents, the
descendants the owner tracks and the cgroup of each launch.

Every answer the owner gives about these facts is given after they are committed. Two
kinds of commit, by what a fact must survive:

- the epoch and grant and the stack intents must outlive the machine's boot: their
  commits are fsynced (:func:`protocol.durable.synced_transaction`);
- everything else describes processes of this boot (launch rows, exits, descendants) and
  must survive a crash of the owner, which a commit to the WAL gives without an fsync
  (synchronous=NORMAL: the data is in the kernel's page cache, which outlives the
  process). A crash of the machine ends every process these rows describe; it may lose
  the newest of these rows, and the next owner treats launches of an earlier boot as
  ended anyway. Any later fsynced commit makes every earlier one durable too.

The epoch moves only forward, by compare-and-set.

Tables added after format 1 shipped are in :data:`EXPAND`: created where missing, so an
owner.db of an older owner reads as having none of their rows, and an older owner that
opens a newer owner.db ignores them (expand-only: nothing is renamed or dropped).
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgpack

from protocol.durable import json_map, open_sqlite, synced_transaction, transaction
from protocol.errors import Conflict, NotFound, StaleEpoch, StateCorrupt
from protocol.schema import is_count

__all__ = ["DAMAGED", "Intent", "LaunchRow", "LaunchState", "OwnerStore", "Tracked"]

DAMAGED = ("a damaged owner.db is set aside with its -wal and -shm, and what it recorded "
           "is found and stopped by `tenure owner reconcile --prepare` and `--drain` "
           "(docs/reconcile.md, \"A damaged owner.db\")")
"""The way out that every refusal of a damaged owner.db ends with: the owner cannot start
on it, and nothing but the operator may decide to start without what it recorded."""

FORMAT = 1
SCHEMA = """
CREATE TABLE fence (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL,
    grant_wire BLOB,
    updated_at REAL NOT NULL
);
INSERT INTO fence VALUES (1, 0, NULL, 0);
CREATE TABLE launches (
    launch_key TEXT PRIMARY KEY,
    stack TEXT NOT NULL, app TEXT NOT NULL, instance INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    pid INTEGER, start_ticks INTEGER, pgid INTEGER,
    started_at REAL, ended_at REAL,
    exit TEXT, error TEXT,
    epoch INTEGER NOT NULL,
    boot_id TEXT NOT NULL
);
CREATE INDEX launches_live ON launches (state);
CREATE TABLE intents (
    stack TEXT PRIMARY KEY,
    intent TEXT NOT NULL,
    revision INTEGER NOT NULL,
    updated_at REAL NOT NULL
)
"""
EXPAND = """
CREATE TABLE IF NOT EXISTS descendants (
    pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    launch_key TEXT NOT NULL,
    boot_id TEXT NOT NULL DEFAULT '',
    seen_at REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (pid, start_ticks)
);
CREATE TABLE IF NOT EXISTS launch_cgroups (
    launch_key TEXT PRIMARY KEY,
    path TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS stop_order (
    stack TEXT PRIMARY KEY,
    levels TEXT NOT NULL
)
"""


class LaunchState(StrEnum):
    STARTING = "starting"  # row written, process not yet known to exist
    RUNNING = "running"
    EXITED = "exited"
    FAILED = "failed"      # could not be started; nothing runs
    LOST = "lost"          # the owner died while it ran; proven gone by reconcile
    # The process was started (or ended) but the row saying so could not be written: the
    # owner's memory is the truth and reports this state until a write succeeds. Only
    # ever in memory and on the wire: the row on disk still says what it said before.
    UNCERTAIN = "uncertain"


class Intent(StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"


_INTENTS = frozenset(i.value for i in Intent)


@dataclass(frozen=True)
class LaunchRow:
    launch_key: str
    stack: str
    app: str
    instance: int
    generation: int
    spec: dict[str, Any]
    state: LaunchState
    pid: int | None
    start_ticks: int | None
    pgid: int | None
    started_at: float | None
    ended_at: float | None
    exit: dict[str, Any] | None
    error: dict[str, Any] | None

    def to_wire(self) -> dict[str, Any]:
        return {"launch_key": self.launch_key, "stack": self.stack, "app": self.app,
                "instance": self.instance, "generation": self.generation,
                "state": str(self.state), "pid": self.pid, "start_ticks": self.start_ticks,
                "pgid": self.pgid, "started_at": self.started_at, "ended_at": self.ended_at,
                "exit": self.exit, "error": self.error}


_COLS = ("launch_key, stack, app, instance, generation, spec, state, pid, start_ticks, "
         "pgid, started_at, ended_at, exit, error")


_INT, _OPT_INT, _OPT_NUM = (int,), (int, type(None)), (int, float, type(None))
# the types of the columns _row takes as they are: SQLite lets a column hold any type
_SHAPE = ((0, (str,)), (1, (str,)), (2, (str,)), (3, _INT), (4, _INT), (7, _OPT_INT),
          (8, _OPT_INT), (9, _OPT_INT), (10, _OPT_NUM), (11, _OPT_NUM))


def _row(r: tuple[Any, ...]) -> LaunchRow:
    """The launch of row ``r`` (:data:`_COLS`). Raises StateCorrupt naming the launch for
    a row this owner cannot read (a damaged owner.db): every column of its type, the
    spec a JSON map, the exit and the error JSON maps or empty."""
    try:
        if any(type(r[i]) not in types for i, types in _SHAPE):
            raise TypeError("a column of another type")
        _check_process(r[7], r[8], r[9])
        row = LaunchRow(r[0], r[1], r[2], r[3], r[4], _json_map(r[5]), LaunchState(r[6]),
                        r[7], r[8], r[9], r[10], r[11],
                        _json_map(r[12]) if r[12] else None,
                        _json_map(r[13]) if r[13] else None)
    except (TypeError, ValueError) as exc:
        raise _damaged(f"the row of launch {str(r[0])[:200]!r} cannot be read "
                       f"({str(exc)[:200]})", {"launch_key": str(r[0])[:200]}) from None
    return row


def _check_process(pid: int | None, start_ticks: int | None, pgid: int | None) -> None:
    """Raises ValueError unless the process columns are as the owner writes them: a pid
    of at least 1 and start ticks of at least 0, and the process group the pid's own
    (every launch leads a session of its own). A reconcile signals a launch's group: a
    damaged pgid would name some other program's."""
    if (pid is not None and pid < 1) or (start_ticks is not None and start_ticks < 0):
        raise ValueError("its pid or start ticks are out of range")
    if pgid is not None and pgid != pid:
        raise ValueError("its process group is not its own")


def _count(what: str, value: Any, least: int = 0) -> int:
    """``value`` when it is an integer of at least ``least``; raises StateCorrupt naming
    ``what`` otherwise (SQLite lets an INTEGER column hold text or a blob)."""
    if not is_count(value, least):
        raise _damaged(f"{what} is not a count", {"what": what})
    return value


def _intent(stack: str, intent: Any, revision: Any) -> tuple[Intent, int]:
    """A stack's intent row. Raises StateCorrupt naming the stack."""
    if not isinstance(intent, str) or intent not in _INTENTS:
        raise _damaged(f"the intent of stack {str(stack)[:200]!r} is not one of running, "
                       "stopped", {"stack": str(stack)[:200]})
    return Intent(intent), _count(f"the intent revision of stack {str(stack)[:200]!r}",
                                  revision)


def _damaged(what: str, data: dict[str, Any]) -> StateCorrupt:
    return StateCorrupt(f"owner.db: {what}; {DAMAGED}", data)


def _json_map(text: Any) -> dict[str, Any]:
    """A JSON object's text as a dict. Raises TypeError for anything else."""
    value = json_map(text)
    if value is None:
        raise TypeError("a column that is not a JSON map")
    return value


@dataclass(frozen=True)
class Tracked:
    """A descendant of a launch that the owner tracks: (pid, start ticks) is its identity
    on ``boot_id``."""

    pid: int
    start_ticks: int
    launch_key: str
    boot_id: str = ""


class OwnerStore:
    """All access to owner.db. Methods raise StateCorrupt/UnsafePath on open, and
    StateCorrupt for a row they cannot read (a launch, the fence, a stack's intent, a
    descendant: a damaged owner.db)."""

    def __init__(self, path: str) -> None:
        # WAL + NORMAL: a commit survives the owner's crash; synced_transaction adds
        # the fsync for what must outlive the boot (see the module's docstring)
        self.db = open_sqlite(path, "tenure-owner", FORMAT, SCHEMA, synchronous="NORMAL",
                              wal=True, way_out=DAMAGED)
        self._expand()

    def close(self) -> None:
        self.db.close()

    def _expand(self) -> None:
        """Create the tables of :data:`EXPAND` that are missing (an older owner.db); no
        write at all when every one exists."""
        statements = [s.strip() for s in EXPAND.split(";") if s.strip()]
        have = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = "
                                              "'table'")}
        if all(s.split()[5] in have for s in statements):
            return
        with transaction(self.db):
            for statement in statements:
                self.db.execute(statement)

    # -- fencing ----------------------------------------------------------------------

    def epoch(self) -> int:
        """The fence's epoch. Raises StateCorrupt when it is not a count."""
        return _count("the fence's epoch", self._fence()[0])

    def _fence(self) -> tuple[Any, Any]:
        """The fence row: (epoch, grant_wire) as stored. Raises StateCorrupt when there is
        none (every owner.db is made with it, and nothing deletes it)."""
        row = self.db.execute("SELECT epoch, grant_wire FROM fence WHERE id = 1").fetchone()
        if row is None:
            raise _damaged("the fence row is missing", {"what": "fence"})
        return row[0], row[1]

    def grant(self) -> dict[str, Any] | None:
        """``{epoch, activation}`` of the grant the owner holds, or None before the first
        fence. A value written by an older owner (the signature alone) names no
        activation: ``activation`` is None then, which proves nothing to the guardian."""
        row = self._fence()
        if row[0] == 0:
            return None
        activation = None
        try:
            held = msgpack.unpackb(row[1]) if row[1] else None
        except (TypeError, ValueError, msgpack.ExtraData, msgpack.FormatError,
                msgpack.StackError):   # TypeError: TEXT or INTEGER where bytes belong
            held = None
        if isinstance(held, dict) and isinstance(held.get("grant"), dict):
            value = held["grant"].get("activation")
            activation = value if isinstance(value, str) else None
        return {"epoch": _count("the fence's epoch", row[0]), "activation": activation}

    def advance_epoch(self, expected: int, new: int, grant_wire: bytes) -> None:
        """Compare-and-set the epoch. Raises StaleEpoch naming the current epoch."""
        if new <= expected:
            raise StaleEpoch(f"epoch {new} is not newer than {expected}", {"current": expected})
        with synced_transaction(self.db):
            cur = self.db.execute(
                "UPDATE fence SET epoch = ?, grant_wire = ?, updated_at = ? "
                "WHERE id = 1 AND epoch = ?", (new, grant_wire, time.time(), expected))
        if cur.rowcount != 1:
            current = self.epoch()
            raise StaleEpoch(f"epoch moved to {current} meanwhile", {"current": current})

    # -- launches ---------------------------------------------------------------------

    def get_launch(self, key: str) -> LaunchRow | None:
        r = self.db.execute(f"SELECT {_COLS} FROM launches WHERE launch_key = ?",
                            (key,)).fetchone()
        return _row(r) if r else None

    def insert_launch(self, key: str, p: dict[str, Any], spec: dict[str, Any], epoch: int,
                      boot_id: str, cgroup: str | None = None) -> None:
        """Record a launch before its process exists, with the cgroup it will get (cgroup
        mode), in one transaction. Raises Conflict on a used key."""
        try:
            with transaction(self.db):
                self.db.execute(
                    "INSERT INTO launches (launch_key, stack, app, instance, generation, "
                    "spec, state, epoch, boot_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (key, p["stack"], p["app"], p["instance"], p["generation"],
                     json.dumps(spec, sort_keys=True), LaunchState.STARTING, epoch, boot_id))
                if cgroup is not None:
                    self.db.execute("INSERT OR REPLACE INTO launch_cgroups VALUES (?, ?)",
                                    (key, cgroup))
        except sqlite3.IntegrityError:
            raise Conflict(f"launch key {key!r} already used", {"launch_key": key}) from None

    def ended_cgroups(self, boot_id: str) -> dict[str, str]:
        """Launch key -> recorded cgroup of the launches of boot ``boot_id`` that are no
        longer recorded live (their cgroup may still hold what outlived the leader)."""
        rows = self.db.execute(
            "SELECT c.launch_key, c.path FROM launch_cgroups c JOIN launches l "
            "ON l.launch_key = c.launch_key WHERE l.boot_id = ? AND l.state NOT IN (?, ?) "
            "ORDER BY l.rowid", (boot_id, LaunchState.STARTING, LaunchState.RUNNING))
        return {str(k): str(p) for k, p in rows}

    def cgroups(self, keys: list[str]) -> dict[str, str]:
        """The recorded cgroup directory of each of ``keys`` that has one."""
        out: dict[str, str] = {}
        for key in keys:
            r = self.db.execute("SELECT path FROM launch_cgroups WHERE launch_key = ?",
                                (key,)).fetchone()
            if r is not None:
                out[key] = str(r[0])
        return out

    def mark_running(self, key: str, pid: int, start_ticks: int, pgid: int,
                     started_at: float) -> None:
        """Raises NotFound, or sqlite3.Error/OSError when the write fails."""
        self._set(key, "state = ?, pid = ?, start_ticks = ?, pgid = ?, started_at = ?",
                  (LaunchState.RUNNING, pid, start_ticks, pgid, started_at))

    def mark_failed(self, key: str, error: dict[str, Any]) -> None:
        self._set(key, "state = ?, error = ?, ended_at = ?",
                  (LaunchState.FAILED, json.dumps(error), time.time()))

    def mark_exited(self, key: str, exit_wire: dict[str, Any],
                    started: LaunchRow | None = None) -> None:
        """Record the exit; with ``started`` (a row whose ``running`` write failed) its
        pid, start ticks, group and start time too. Raises NotFound, or
        sqlite3.Error/OSError when the write fails."""
        if started is None:
            self._set(key, "state = ?, exit = ?, ended_at = ?",
                      (LaunchState.EXITED, json.dumps(exit_wire), time.time()))
            return
        self._set(key, "state = ?, exit = ?, ended_at = ?, pid = ?, start_ticks = ?, "
                  "pgid = ?, started_at = ?",
                  (LaunchState.EXITED, json.dumps(exit_wire), time.time(), started.pid,
                   started.start_ticks, started.pgid, started.started_at))

    def mark_lost(self, keys: list[str]) -> None:
        now = time.time()
        self.db.executemany("UPDATE launches SET state = ?, ended_at = ? WHERE launch_key = ?",
                            [(LaunchState.LOST, now, k) for k in keys])

    def _set(self, key: str, assignments: str, values: tuple[Any, ...]) -> None:
        cur = self.db.execute(f"UPDATE launches SET {assignments} WHERE launch_key = ?",
                              (*values, key))
        if cur.rowcount != 1:
            raise NotFound(f"no launch {key!r}", {"launch_key": key})

    def live_launches(self) -> list[LaunchRow]:
        """Launches not known to be over (starting or running)."""
        rows = self.db.execute(
            f"SELECT {_COLS} FROM launches WHERE state IN (?, ?) ORDER BY rowid",
            (LaunchState.STARTING, LaunchState.RUNNING)).fetchall()
        return [_row(r) for r in rows]

    def prune_ended(self, keep: int, protect: set[str]) -> int:
        """Delete the rows of ended launches (exited, failed, lost) but the newest
        ``keep`` and those in ``protect``; they hold app environments. Their recorded
        cgroups go with them. Rows of launches that may still run are never touched.
        Returns how many were deleted."""
        ended = (LaunchState.EXITED, LaunchState.FAILED, LaunchState.LOST)
        with transaction(self.db) as db:
            old = [k for (k,) in db.execute(
                "SELECT launch_key FROM launches WHERE state IN (?, ?, ?) "
                "ORDER BY rowid DESC LIMIT -1 OFFSET ?",
                (*ended, keep)) if k not in protect]
            db.executemany("DELETE FROM launches WHERE launch_key = ? AND state IN (?, ?, ?)",
                           [(k, *ended) for k in old])
            db.executemany("DELETE FROM launch_cgroups WHERE launch_key = ?",
                           [(k,) for k in old])
        return len(old)

    def live_launches_of_boot(self, boot_id: str) -> int:
        """How many launches of this boot are recorded as starting or running."""
        return int(self.db.execute(
            "SELECT count(*) FROM launches WHERE state IN (?, ?) AND boot_id = ?",
            (LaunchState.STARTING, LaunchState.RUNNING, boot_id)).fetchone()[0])

    # -- tracked descendants --------------------------------------------------------

    def record_descendants(self, added: list[Tracked], gone: list[tuple[int, int]]) -> None:
        """Add ``added`` and forget ``gone`` ((pid, start ticks)) in one transaction.
        Raises sqlite3.Error or OSError when the write fails (nothing changed then)."""
        now = time.time()
        with transaction(self.db):
            self.db.executemany("DELETE FROM descendants WHERE pid = ? AND start_ticks = ?",
                                gone)
            self.db.executemany(
                "INSERT OR REPLACE INTO descendants VALUES (?, ?, ?, ?, ?)",
                [(t.pid, t.start_ticks, t.launch_key, t.boot_id, now) for t in added])

    def descendants(self, boot_id: str) -> list[Tracked]:
        """The descendants recorded on boot ``boot_id`` (start ticks mean nothing on
        another boot)."""
        rows = self.db.execute(
            "SELECT pid, start_ticks, launch_key, boot_id FROM descendants WHERE boot_id = ? "
            "ORDER BY launch_key, pid", (boot_id,)).fetchall()
        return [Tracked(_count("a descendant's pid", r[0], 1),
                        _count("a descendant's start ticks", r[1]), str(r[2]), str(r[3]))
                for r in rows]   # a damaged row refuses: skipped, a process would be lost

    def clear_descendants(self) -> None:
        """Forget every recorded descendant (a new owner: they are proven gone, or of
        another boot)."""
        self.db.execute("DELETE FROM descendants")

    # -- stack intents ----------------------------------------------------------------

    def intent(self, stack: str) -> tuple[Intent, int]:
        """The stack's intent and its revision (running, 0 when none is recorded).
        Raises StateCorrupt for a damaged row."""
        r = self.db.execute("SELECT intent, revision FROM intents WHERE stack = ?",
                            (stack,)).fetchone()
        return _intent(stack, r[0], r[1]) if r else (Intent.RUNNING, 0)

    def intents(self) -> dict[str, dict[str, Any]]:
        """Every recorded stack intent. Raises StateCorrupt for a damaged row."""
        rows = self.db.execute("SELECT stack, intent, revision, updated_at FROM intents")
        out = {}
        for s, i, r, u in rows:
            intent, revision = _intent(s, i, r)
            out[s] = {"intent": str(intent), "revision": revision, "updated_at": u}
        return out

    def stop_order(self) -> list[tuple[str, str]]:
        """The stored stop order's rows, (stack, its levels as JSON): owner.stoporder
        reads them."""
        return [(str(s), str(v)) for s, v in
                self.db.execute("SELECT stack, levels FROM stop_order ORDER BY stack")]

    def set_stop_order(self, order: dict[str, list[list[str]]]) -> None:
        """Replace the stored stop order by ``order`` (stack -> levels), durably."""
        with synced_transaction(self.db):
            self.db.execute("DELETE FROM stop_order")
            self.db.executemany("INSERT INTO stop_order VALUES (?, ?)",
                                [(s, json.dumps(v)) for s, v in sorted(order.items())])

    def set_intent(self, stack: str, intent: Intent, expected_revision: int) -> int:
        """Compare-and-set a stack's intent. Returns the new revision; raises Conflict."""
        with synced_transaction(self.db):
            _, revision = self.intent(stack)
            if revision != expected_revision:
                raise Conflict(f"stack {stack!r} intent is at revision {revision}, not "
                               f"{expected_revision}", {"revision": revision})
            self.db.execute(
                "INSERT INTO intents VALUES (?, ?, ?, ?) ON CONFLICT(stack) DO UPDATE SET "
                "intent = excluded.intent, revision = excluded.revision, "
                "updated_at = excluded.updated_at",
                (stack, intent, revision + 1, time.time()))
        return revision + 1

