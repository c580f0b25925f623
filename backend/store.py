"""backend.db: the applied configuration, instance snapshots (restart counters, backoff),
plans and operations; and recovery.db: recovery certificates.

Both SQLite (backend.db synchronous=FULL, recovery.db NORMAL: see RecoveryStore), shared
by every backend generation of a home (one at a time). Operations advance their stage by
compare-and-set.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from protocol.certificate import DAMAGED as RECOVERY_DAMAGED
from protocol.durable import json_map, open_sqlite, read_rows, transaction
from protocol.errors import Conflict, NotFound, StaleEpoch, StateCorrupt
from protocol.schema import is_str_list

__all__ = ["DAMAGED", "BackendStore", "RecoveryStore", "saved_config"]

log = logging.getLogger("tenure.backend")

FORMAT = 1   # backend.db's format_version (backend/schemas.py declares it)
SCHEMA = """
CREATE TABLE config (
    id INTEGER PRIMARY KEY CHECK (id = 1), text TEXT NOT NULL, source TEXT NOT NULL,
    revision TEXT NOT NULL, applied_at REAL NOT NULL);
CREATE TABLE instances (key TEXT PRIMARY KEY, wire TEXT NOT NULL);
CREATE TABLE plans (
    id TEXT PRIMARY KEY, created_at REAL NOT NULL, config_text TEXT NOT NULL,
    config_source TEXT NOT NULL, config_revision TEXT NOT NULL, live_revision TEXT NOT NULL,
    fingerprint TEXT NOT NULL, changes TEXT NOT NULL, kind TEXT NOT NULL);
CREATE TABLE operations (
    id TEXT PRIMARY KEY, plan TEXT, kind TEXT NOT NULL, stacks TEXT NOT NULL,
    stage TEXT NOT NULL, step INTEGER NOT NULL, outcome TEXT, error TEXT,
    request_id TEXT UNIQUE, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    generation TEXT, progress TEXT);
CREATE TABLE requests (id TEXT PRIMARY KEY, result TEXT NOT NULL, at REAL NOT NULL)
"""

# A part of backend.db (BackendStore.ensure_part): the last generation of each removed
# instance, so that one added back under its key never reuses a spent launch key.
RETIRED_PART, RETIRED_FORMAT = "retired", 1
RETIRED_SCHEMA = "CREATE TABLE retired (key TEXT PRIMARY KEY, generation INTEGER NOT NULL)"

# A part of backend.db: the starts wanted once an instance is down (backend.after_stop),
# written before the stop they follow is sent, so that a restart cut by a crash of its
# generation still ends with the app started by the next one.
STARTS_PART, STARTS_FORMAT = "starts", 1
STARTS_SCHEMA = ("CREATE TABLE starts_after_stop (key TEXT PRIMARY KEY, activation TEXT NOT "
                 "NULL, at REAL NOT NULL)")

# A part of backend.db: what each start in starts_after_stop waits for (``kind``:
# backend.after_stop.WaitKind) and until when (``deadline``, wall clock: the only clock a
# later process can compare). A table of its own, not new columns of starts_after_stop: a
# release that predates it inserts three values into that table, and never reads this one.
# A row counts only while starts_after_stop's row has its ``activation`` and ``at`` (one
# left behind by such a release belongs to an older record); a start without one is taken
# over as a start after a stop, as before the part existed.
WAITS_PART, WAITS_FORMAT = "start_waits", 1
WAITS_SCHEMA = ("CREATE TABLE start_waits (key TEXT PRIMARY KEY, activation TEXT NOT NULL, "
                "at REAL NOT NULL, kind TEXT NOT NULL, deadline REAL NOT NULL)")

# A part of backend.db: which generation may write the apps' state (BackendStore.hold).
# A generation fenced off while it could not tell (stopped, say) must not overwrite what
# the generation holding the owner saves; the row is the fencing token on disk.
HOLDER_PART, HOLDER_FORMAT = "holder", 1
HOLDER_SCHEMA = ("CREATE TABLE holder (id INTEGER PRIMARY KEY CHECK (id = 1), owner TEXT "
                 "NOT NULL, epoch INTEGER NOT NULL, activation TEXT NOT NULL)")

# A part of backend.db: the instances a `tenure stop` has still to ask, with their level
# (1 is asked next), written before its first level is asked, so that a stop cut by the
# end of its generation is finished, in order, by the next one (backend.stop_records).
# ``command`` names the stop for the log; ``activation`` the generation whose record it is.
STOPS_PART, STOPS_FORMAT = "stops_to_ask", 1
STOPS_SCHEMA = ("CREATE TABLE stops_to_ask (key TEXT PRIMARY KEY, level INTEGER NOT NULL, "
                "command TEXT NOT NULL, activation TEXT NOT NULL, at REAL NOT NULL)")

RECOVERY_SCHEMA = """
CREATE TABLE certificate (
    id INTEGER PRIMARY KEY CHECK (id = 1), valid INTEGER NOT NULL, body TEXT,
    updated_at REAL NOT NULL);
INSERT INTO certificate VALUES (1, 0, NULL, 0)
"""


def saved_config(path: str) -> tuple[str, str] | None:
    """The applied config's text and source as backend.db at ``path`` holds them now,
    read without opening the store: nothing is created or changed (a standby reads it
    before it may write anything). None when there is no backend.db or no config.
    Raises UnsafePath, sqlite3.Error."""
    rows = read_rows(path, "SELECT text, source FROM config WHERE id = 1")
    return (rows[0][0], rows[0][1]) if rows else None


DAMAGED = ("a damaged backend.db is set aside with its -wal and -shm, and `tenure backend "
           "recover --config FILE` given the config it applied (docs/recover.md, \"A "
           "damaged backend.db\")")
"""The way out a refusal to open backend.db ends with (backend.configrestore)."""


class BackendStore:
    def __init__(self, path: str) -> None:
        self.db = open_sqlite(path, "tenure-backend", FORMAT, SCHEMA, synchronous="FULL",
                              wal=True, way_out=DAMAGED)
        self.ensure_part(RETIRED_PART, RETIRED_FORMAT, RETIRED_SCHEMA)
        self.ensure_part(STARTS_PART, STARTS_FORMAT, STARTS_SCHEMA)
        self.ensure_part(WAITS_PART, WAITS_FORMAT, WAITS_SCHEMA)
        self.ensure_part(HOLDER_PART, HOLDER_FORMAT, HOLDER_SCHEMA)
        self.ensure_part(STOPS_PART, STOPS_FORMAT, STOPS_SCHEMA)
        self._held: tuple[str, int, str] | None = None   # (owner, epoch, activation)

    def close(self) -> None:
        self.db.close()

    def ensure_part(self, name: str, version: int, schema: str) -> bool:
        """Add the tables of a named part of backend.db once, in one transaction, and
        record ``part:<name> = version`` in ``meta``. Returns whether they were created.
        Raises StateCorrupt for a part recorded at another version (never modified).

        Parts keep the file's own format at 1: a database written before a part existed
        opens and gains its tables, and a release that predates the part (a rollback
        target) still opens the file and simply never reads those tables."""
        key = f"part:{name}"
        with self.tx() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            if row is not None:
                if row[0] != str(version):
                    raise StateCorrupt(
                        f"backend.db holds {name} format {row[0]}; this build reads "
                        f"format {version}", {"part": name, "format": row[0]})
                return False
            for statement in (s.strip() for s in schema.split(";")):
                if statement:
                    db.execute(statement)
            db.execute("INSERT INTO meta VALUES (?, ?)", (key, str(version)))
        return True

    def tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self.db)

    # -- config -----------------------------------------------------------------------

    def config(self) -> dict[str, Any] | None:
        """The applied config, or None. Raises StateCorrupt for a damaged row."""
        r = self.db.execute("SELECT text, source, revision, applied_at FROM config").fetchone()
        if r is None:
            return None
        _shaped("the applied config", r, (_S, _S, _S, _NUM))
        return {"text": r[0], "source": r[1], "revision": r[2], "applied_at": r[3]}

    def set_config(self, db: sqlite3.Connection, text: str, source: str,
                   revision: str) -> None:
        db.execute("INSERT INTO config VALUES (1, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                   "text = excluded.text, source = excluded.source, "
                   "revision = excluded.revision, applied_at = excluded.applied_at",
                   (text, source, revision, time.time()))

    # -- who may write the apps' state -------------------------------------------------

    def hold(self, owner: str, epoch: int, activation: str) -> None:
        """Claim the apps' state for generation ``activation``, which holds ``epoch`` of
        owner instance ``owner`` (the owner confirmed it). The stops still to ask
        (``stops_to_ask``) pass to it in the same transaction when the generation that
        held the state before held them; the others are stale and go: a generation
        whose release does not know them ran in between (a handoff back to an older
        release), and commands it took since never forgot them. Raises StaleEpoch when a
        generation of a newer epoch of that owner holds it already."""
        with self.tx() as db:
            row = db.execute("SELECT owner, epoch, activation FROM holder").fetchone()
            if row is not None:
                _shaped("the holder", row, (_S, _INT, _S))
            if row is not None and row[0] == owner and row[1] > epoch:
                raise StaleEpoch(f"backend.db is held by generation {row[2]} at epoch "
                                 f"{row[1]}, newer than {epoch}", {"current": row[1]})
            db.execute("INSERT INTO holder VALUES (1, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                       "owner = excluded.owner, epoch = excluded.epoch, "
                       "activation = excluded.activation", (owner, epoch, activation))
            db.execute("DELETE FROM stops_to_ask WHERE activation IS NOT ?",
                       (None if row is None else row[2],))
            db.execute("UPDATE stops_to_ask SET activation = ?", (activation,))
        self._held = (owner, epoch, activation)

    def _check_held(self, db: sqlite3.Connection) -> None:
        """Inside a write transaction: raises StaleEpoch when another generation claimed
        the apps' state since this one did (nothing is checked before a claim)."""
        if self._held is None:
            return
        row = db.execute("SELECT owner, epoch, activation FROM holder").fetchone()
        if row is None or tuple(row) != self._held:
            held = "nobody" if row is None else f"generation {row[2]} at epoch {row[1]}"
            raise StaleEpoch(f"backend.db's apps' state is held by {held}",
                             {"current": None if row is None else row[1]})

    # -- instances --------------------------------------------------------------------

    def save_instances(self, wires: dict[str, dict[str, Any]],
                       removed: Mapping[str, int]) -> None:
        """Save ``wires`` (key -> Instance.to_wire()) and forget the ``removed`` instances,
        keeping each one's last generation (key -> generation) in ``retired``. Raises
        StaleEpoch, saving nothing, when another generation claimed the state since."""
        with self.tx() as db:
            self._check_held(db)
            db.executemany("INSERT INTO instances VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                           "SET wire = excluded.wire",
                           [(k, json.dumps(w, sort_keys=True)) for k, w in wires.items()])
            db.executemany("DELETE FROM instances WHERE key = ?", [(k,) for k in removed])
            db.executemany("INSERT INTO retired VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                           "SET generation = max(generation, excluded.generation)",
                           list(removed.items()))

    def retired(self) -> dict[str, int]:
        """Instance key -> the last generation a removed instance of that key launched."""
        return {k: g for k, g in (_shaped("a retired instance", r, (_S, _INT)) for r in
                                  self.db.execute("SELECT key, generation FROM retired"))}

    def instances(self) -> dict[str, dict[str, Any]]:
        """The saved instances by key. A damaged row is left out, as adoption leaves out
        one that does not validate: the owner's inventory still brings back what runs.
        Its key is logged. Damaged: the wire is not a JSON map, or it names another
        instance than its key (a wire saved under another instance's key would claim
        that instance's launch, and stopping it would stop that one's process)."""
        out = {}
        for key, wire in self.db.execute("SELECT key, wire FROM instances"):
            value = json_map(wire)
            if value is None:
                log.warning("ignoring unreadable saved instance %r: not a JSON map", key)
            elif key != _named(value):
                log.warning("ignoring unreadable saved instance %r: it names %r",
                            key, _named(value))
            else:
                out[key] = value
        return out

    # -- starts wanted once down ------------------------------------------------------

    def want_start(self, key: str, activation: str, wait: tuple[str, float] | None = None
                   ) -> None:
        """Record the start of ``key`` as wanted by generation ``activation`` (taking it
        over from an older one), with what it waits for and until when (``wait``: kind,
        wall-clock deadline; None: nothing said, as a release before start_waits), in
        one transaction. Raises StaleEpoch, recording nothing, when another generation
        claimed the apps' state since this one did: taking its record over would let
        this generation forget it as its own."""
        at = time.time()
        with self.tx() as db:
            self._check_held(db)
            db.execute("INSERT INTO starts_after_stop VALUES (?, ?, ?) ON CONFLICT(key) DO "
                       "UPDATE SET activation = excluded.activation, at = excluded.at",
                       (key, activation, at))
            if wait is None:
                db.execute("DELETE FROM start_waits WHERE key = ?", (key,))
            else:
                db.execute("INSERT OR REPLACE INTO start_waits VALUES (?, ?, ?, ?, ?)",
                           (key, activation, at, wait[0], wait[1]))

    def drop_start(self, key: str, activation: str | None) -> None:
        """Forget the start of ``key``: only if ``activation`` recorded it (a generation
        fenced off never forgets a newer one's), or whoever did with None. Raises
        StaleEpoch for None, forgetting nothing, when another generation claimed the
        apps' state since this one did (the record may be that one's)."""
        with self.tx() as db:
            if activation is None:
                self._check_held(db)
            for table in ("starts_after_stop", "start_waits"):
                db.execute(f"DELETE FROM {table} WHERE key = ? AND (? IS NULL OR "
                           "activation = ?)", (key, activation, activation))

    def wanted_starts(self) -> list[str]:
        """Instance keys whose start, wanted once down, no generation took or withdrew."""
        return [_shaped("a wanted start", r, (_S,))[0] for r in
                self.db.execute("SELECT key FROM starts_after_stop ORDER BY key")]

    def start_waits(self) -> dict[str, tuple[str, float]]:
        """Instance key -> (kind, wall-clock deadline) of each wanted start whose record
        says it (see WAITS_SCHEMA); the kind as stored, for the caller to judge. Raises
        StateCorrupt for a damaged row."""
        rows = self.db.execute(
            "SELECT w.key, w.kind, w.deadline FROM start_waits w JOIN starts_after_stop s "
            "ON s.key = w.key AND s.activation = w.activation AND s.at = w.at ORDER BY w.key")
        return {k: (kind, float(deadline)) for k, kind, deadline in
                (_shaped("a wanted start's wait", r, (_S, _S, _NUM)) for r in rows)}

    # -- stops still to ask ------------------------------------------------------------

    def want_stops(self, levels: Sequence[Sequence[str]], command: str, activation: str,
                   asked: Sequence[str] = ()) -> None:
        """Record the instance keys of ``levels`` (the first is level 1) as still to be
        asked to stop by ``command`` of generation ``activation``, and forget the
        records of ``asked`` (asked now), in one transaction. Raises StaleEpoch,
        recording nothing, when another generation claimed the apps' state since this
        one did."""
        at = time.time()
        with self.tx() as db:
            self._check_held(db)
            db.executemany("DELETE FROM stops_to_ask WHERE key = ?", [(k,) for k in asked])
            db.executemany("INSERT OR REPLACE INTO stops_to_ask VALUES (?, ?, ?, ?, ?)",
                           [(k, n, command, activation, at)
                            for n, keys in enumerate(levels, 1) for k in keys])

    def drop_stops(self, keys: Sequence[str], activation: str | None) -> None:
        """Forget the stops of ``keys`` still to ask: only the records of ``activation``
        (its own, as it asks them), or, with None, whoever made them (a later command
        took the keys). Raises StaleEpoch for None, forgetting nothing, when another
        generation claimed the apps' state since this one did."""
        if not keys:
            return
        with self.tx() as db:
            if activation is None:
                self._check_held(db)
            db.executemany("DELETE FROM stops_to_ask WHERE key = ? AND (? IS NULL OR "
                           "activation = ?)", [(k, activation, activation) for k in keys])

    def claim_stops(self, keys: Sequence[str], activation: str) -> None:
        """Make the records of ``keys`` generation ``activation``'s (it finishes them).
        Raises StaleEpoch, changing nothing, as :meth:`drop_stops` with None."""
        with self.tx() as db:
            self._check_held(db)
            db.executemany("UPDATE stops_to_ask SET activation = ? WHERE key = ?",
                           [(activation, k) for k in keys])

    def stops_to_ask(self) -> tuple[list[tuple[str, int, str]], int]:
        """The stops still to ask, (key, level, command) by level then key, and how many
        rows cannot be read (each is left as it is, and stops nothing)."""
        rows, damaged = [], 0
        for r in self.db.execute("SELECT key, level, command, activation, at FROM "
                                 "stops_to_ask ORDER BY level, key"):
            if any(type(v) not in t for v, t in zip(r, (_S, _INT, _S, _S, _NUM),
                                                     strict=True)) or r[1] < 1:
                damaged += 1
            else:
                rows.append((r[0], r[1], r[2]))
        return rows, damaged

    # -- plans ------------------------------------------------------------------------

    def add_plan(self, plan: dict[str, Any]) -> None:
        self.db.execute(
            "INSERT INTO plans VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (plan["id"], time.time(), plan["config_text"], plan["config_source"],
             plan["config_revision"], plan["live_revision"], plan["fingerprint"],
             json.dumps(plan["changes"], sort_keys=True), plan["kind"]))

    def plan(self, plan_id: str) -> dict[str, Any]:
        r = self.db.execute("SELECT id, created_at, config_text, config_source, "
                            "config_revision, live_revision, fingerprint, changes, kind "
                            "FROM plans WHERE id = ?", (plan_id,)).fetchone()
        if r is None:
            raise NotFound(f"no plan {plan_id}", {"plan": plan_id})
        what = f"plan {str(plan_id)[:100]!r}"
        _shaped(what, r, (_S, _NUM, _S, _S, _S, _S, _S, _S, _S))
        return {"id": r[0], "created_at": r[1], "config_text": r[2], "config_source": r[3],
                "config_revision": r[4], "live_revision": r[5], "fingerprint": r[6],
                "changes": _json(what, r[7], _changes), "kind": r[8]}

    # -- operations -------------------------------------------------------------------

    def create_operation(self, op: dict[str, Any], *, config: tuple[str, str, str] | None
                         = None) -> None:
        """Insert an operation; refuse (OperationInProgress is decided by the caller) a
        duplicate request id with Conflict. With ``config`` the new desired config commits
        in the same transaction."""
        now = time.time()
        try:
            with self.tx() as db:
                db.execute("INSERT INTO operations VALUES (?, ?, ?, ?, ?, 0, NULL, NULL, ?, ?, "
                           "?, ?, NULL)", (op["id"], op.get("plan"), op["kind"],
                                     json.dumps(sorted(op["stacks"])), op["stage"],
                                     op.get("request_id"), now, now, op.get("generation")))
                if config is not None:
                    self.set_config(db, *config)
        except sqlite3.IntegrityError:
            raise Conflict("request id already used", {"request_id": op.get("request_id")}
                           ) from None

    def advance_operation(self, op_id: str, expected: str, stage: str, step: int,
                          outcome: str | None = None, error: str | None = None,
                          progress: dict[str, Any] | None = None) -> None:
        """Compare-and-set the stage; raises Conflict when it moved."""
        cur = self.db.execute(
            "UPDATE operations SET stage = ?, step = ?, outcome = ?, error = ?, progress = ?, "
            "updated_at = ? WHERE id = ? AND stage = ?",
            (stage, step, outcome, error, json.dumps(progress) if progress else None,
             time.time(), op_id, expected))
        if cur.rowcount != 1:
            raise Conflict(f"operation {op_id} is no longer {expected}")

    def set_progress(self, op_id: str, progress: dict[str, Any]) -> None:
        self.db.execute("UPDATE operations SET progress = ?, updated_at = ? WHERE id = ?",
                        (json.dumps(progress), time.time(), op_id))

    def operation(self, op_id: str) -> dict[str, Any]:
        rows = self._ops("WHERE id = ?", (op_id,))
        if not rows:
            raise NotFound(f"no operation {op_id}", {"operation": op_id})
        return rows[0]

    def operation_by_request(self, request_id: str) -> dict[str, Any] | None:
        rows = self._ops("WHERE request_id = ?", (request_id,))
        return rows[0] if rows else None

    def operations(self, open_only: bool = False, limit: int = 50) -> list[dict[str, Any]]:
        where = "WHERE outcome IS NULL" if open_only else ""
        return self._ops(f"{where} ORDER BY rowid DESC LIMIT ?", (limit,))

    def prune(self, operations: int, plans: int) -> dict[str, int]:
        """Delete finished operations but the newest ``operations``, then plans no kept
        operation names but the newest ``plans``; an open operation and its plan are
        never touched. One transaction. Returns how many of each were deleted."""
        with self.tx() as db:
            ops = db.execute(
                "DELETE FROM operations WHERE outcome IS NOT NULL AND id NOT IN (SELECT id "
                "FROM operations WHERE outcome IS NOT NULL ORDER BY rowid DESC LIMIT ?)",
                (operations,)).rowcount
            gone = db.execute(
                "DELETE FROM plans WHERE id NOT IN (SELECT plan FROM operations WHERE plan "
                "IS NOT NULL) AND id NOT IN (SELECT id FROM plans ORDER BY rowid DESC "
                "LIMIT ?)", (plans,)).rowcount
        return {"operations": ops, "plans": gone}

    def _ops(self, where: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT id, plan, kind, stacks, stage, step, outcome, error, request_id, "
            f"created_at, updated_at, generation, progress FROM operations {where}", args)
        return [_op(r) for r in rows]


class RecoveryStore:
    """recovery.db: at most one certificate, valid or invalidated.

    synchronous=NORMAL: a commit survives a crash of the backend (the WAL write is in the
    kernel's page cache), which is what the certificate serves. A certificate vouches
    for processes of this boot under one owner instance; after a crash of the machine
    none of them runs and the guardian refuses a certificate that names another owner
    instance, so an fsync per invalidation (the first launch or stop after each
    certificate waited for one) would protect nothing."""

    def __init__(self, path: str) -> None:
        self.db = open_sqlite(path, "tenure-recovery", 1, RECOVERY_SCHEMA,
                              synchronous="NORMAL", wal=True, way_out=RECOVERY_DAMAGED)

    def close(self) -> None:
        self.db.close()

    # publish and invalidate write the row whether or not it is there: one deleted (a
    # hand edit) would otherwise never come back, and no certificate could vouch again

    def publish(self, body: dict[str, Any]) -> None:
        self.db.execute("INSERT INTO certificate VALUES (1, 1, ?, ?) ON CONFLICT(id) DO "
                        "UPDATE SET valid = 1, body = excluded.body, "
                        "updated_at = excluded.updated_at",
                        (json.dumps(body, sort_keys=True), time.time()))

    def invalidate(self, reason: str) -> None:
        """Mark the certificate invalid, saying why in its body (a body that is not a
        JSON object, a damaged one, is replaced by just the reason)."""
        self.db.execute("INSERT INTO certificate VALUES (1, 0, json_object('invalidated', ?1), "
                        "?2) ON CONFLICT(id) DO UPDATE SET valid = 0, body = CASE WHEN "
                        "json_valid(body) AND json_type(body) = 'object' THEN json_set(body, "
                        "'$.invalidated', ?1) ELSE json_object('invalidated', ?1) END, "
                        "updated_at = ?2 WHERE valid IS NOT 0",   # a damaged flag too
                        (reason, time.time()))

    def read(self) -> dict[str, Any]:
        """The certificate as stored; a body that is not a JSON object, or a valid flag
        other than the integer 1 (a damaged one), reads as none valid, so the next
        certificate replaces it; so does no row at all (the next one writes it)."""
        r = self.db.execute("SELECT valid, body, updated_at FROM certificate").fetchone()
        if r is None:
            return {"valid": False, "body": None, "updated_at": None}
        return {"valid": type(r[0]) is int and r[0] == 1,
                "body": json_map(r[1]) if r[1] else None, "updated_at": r[2]}


def _named(wire: dict[str, Any]) -> str | None:
    """The instance key a saved wire names (backend.supervisor.instance_key), or None
    when its stack, app or instance number is not of its type."""
    stack, app, index = wire.get("stack"), wire.get("app"), wire.get("instance")
    if type(stack) is not str or type(app) is not str or type(index) is not int:
        return None
    return f"{stack}/{app}/{index}"


_S, _OS, _INT, _NUM = (str,), (str, type(None)), (int,), (int, float)


def _damaged(what: str) -> StateCorrupt:
    return StateCorrupt(f"backend.db: {what} cannot be read; {DAMAGED}", {"what": what})


def _shaped(what: str, row: tuple[Any, ...], shape: tuple[tuple[type, ...], ...]
            ) -> tuple[Any, ...]:
    """``row`` when each column is of one of its types (SQLite lets a column hold any);
    raises StateCorrupt naming ``what`` otherwise."""
    if any(type(v) not in t for v, t in zip(row, shape, strict=True)):
        raise _damaged(what)
    return row


def _json(what: str, text: str, sound: Callable[[Any], bool]) -> Any:
    """The JSON value ``text`` holds when ``sound`` accepts it; raises StateCorrupt
    naming ``what`` otherwise."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise _damaged(what) from None
    if not sound(value):
        raise _damaged(what)
    return value


def _changes(v: Any) -> bool:
    """A plan's changes: a list of maps, each naming its app."""
    return type(v) is list and all(type(c) is dict and type(c.get("app")) is str for c in v)


def _op(r: tuple[Any, ...]) -> dict[str, Any]:
    """An operation's row as a map. Raises StateCorrupt naming it for a damaged one."""
    what = f"operation {str(r[0])[:100]!r}"
    _shaped(what, r, (_S, _OS, _S, _S, _S, _INT, _OS, _OS, _OS, _NUM, _NUM, _OS, _OS))
    return {"id": r[0], "plan": r[1], "kind": r[2], "stacks": _json(what, r[3], is_str_list),
            "stage": r[4], "step": r[5], "outcome": r[6], "error": r[7],
            "request_id": r[8], "created_at": r[9], "updated_at": r[10],
            "generation": r[11],
            "progress": _json(what, r[12], lambda v: type(v) is dict) if r[12] else None}
