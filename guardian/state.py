"""state.db: releases, the selector, the installation lease, grants, activations and
their receipts. SQLite, WAL, synchronous=FULL. Every phase change is a compare-and-set
and writes a receipt row in the same transaction.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from protocol.durable import connect_read_only, json_map, open_sqlite, transaction
from protocol.errors import Conflict, NotFound, OperationInProgress, StateCorrupt
from protocol.grant import Grant, SignedGrant
from protocol.identity import Identity
from protocol.schema import is_count

from . import counters
from .phases import FINAL, Kind, Phase, allowed

__all__ = ["DAMAGED", "KIND", "Activation", "Selector", "StateStore", "check_readable"]

KIND = "tenure-guardian"
FORMAT = 1
DAMAGED = ("a damaged state.db is set aside with its -wal and -shm: the guardian starts a "
           "new one, and a reviewed forced recovery (`tenure backend recover --dry-run`, "
           "then `--digest`) adopts what runs (docs/recover.md, \"A damaged state.db\")")
"""The way out that every refusal of a damaged state.db ends with."""
SCHEMA = """
CREATE TABLE releases (id TEXT PRIMARY KEY, installed_at REAL NOT NULL);
CREATE TABLE selector (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    current TEXT, previous TEXT, revision INTEGER NOT NULL);
INSERT INTO selector VALUES (1, NULL, NULL, 0);
CREATE TABLE lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT, pid INTEGER, start_ticks INTEGER, boot_id TEXT, purpose TEXT,
    acquired_at REAL);
INSERT INTO lease VALUES (1, NULL, NULL, NULL, NULL, NULL, NULL);
CREATE TABLE grants (
    epoch INTEGER PRIMARY KEY, activation TEXT NOT NULL, release TEXT NOT NULL,
    owner_instance TEXT NOT NULL, issued_at REAL NOT NULL, sig BLOB NOT NULL);
CREATE TABLE activations (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, release TEXT NOT NULL, from_release TEXT,
    phase TEXT NOT NULL, outcome TEXT, code TEXT, error TEXT, epoch INTEGER,
    from_epoch INTEGER, backend_pid INTEGER, created_at REAL NOT NULL,
    updated_at REAL NOT NULL);
CREATE TABLE receipts (
    activation TEXT NOT NULL, seq INTEGER NOT NULL, phase TEXT NOT NULL, at REAL NOT NULL,
    detail TEXT NOT NULL, PRIMARY KEY (activation, seq))
"""


@dataclass(frozen=True)
class Selector:
    current: str | None
    previous: str | None
    revision: int


@dataclass(frozen=True)
class Activation:
    id: str
    kind: Kind
    release: str
    from_release: str | None
    phase: Phase
    outcome: str | None
    code: str | None
    error: str | None
    epoch: int | None
    from_epoch: int | None
    backend_pid: int | None
    created_at: float
    updated_at: float

    @property
    def final(self) -> bool:
        return self.phase in FINAL

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "kind": str(self.kind), "release": self.release,
                "from_release": self.from_release, "phase": str(self.phase),
                "outcome": self.outcome, "code": self.code, "error": self.error,
                "epoch": self.epoch, "from_epoch": self.from_epoch,
                "backend_pid": self.backend_pid, "created_at": self.created_at,
                "updated_at": self.updated_at}


_ACT_COLS = ("id, kind, release, from_release, phase, outcome, code, error, epoch, "
             "from_epoch, backend_pid, created_at, updated_at")


def _damaged(what: str, data: dict[str, Any] | None = None) -> StateCorrupt:
    return StateCorrupt(f"state.db: {what}; {DAMAGED}", data)


def _kind(value: str) -> Kind:
    try:
        return Kind(value)
    except ValueError:
        raise _damaged(f"an activation of unknown kind {str(value)[:50]!r}") from None


def _activation(r: tuple[Any, ...]) -> Activation:
    try:
        phase = Phase(r[4])
    except ValueError:
        raise _damaged(f"activation {str(r[0])[:50]} has unknown phase "
                       f"{str(r[4])[:50]!r}") from None
    return Activation(r[0], _kind(r[1]), r[2], r[3], phase, *r[5:])


def check_readable(path: str) -> dict[str, Any]:
    """That this build reads the state.db at ``path``, opened read only (a new guardian's
    preflight: nothing is created or changed). Raises StateCorrupt."""
    try:
        conn = connect_read_only(path)
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StateCorrupt(f"{path} cannot be read: {exc}; {DAMAGED}", {"path": path}) \
            from None
    if meta.get("kind") != KIND or meta.get("format_version") != str(FORMAT):
        raise StateCorrupt(f"{path} holds {meta.get('kind')!r} format "
                           f"{meta.get('format_version')!r}; this guardian reads {KIND!r} "
                           f"format {FORMAT}", {"path": path,
                                                "format": meta.get("format_version")})
    return {"kind": KIND, "format": FORMAT}


class StateStore:
    def __init__(self, path: str) -> None:
        self.db = open_sqlite(path, KIND, FORMAT, SCHEMA, synchronous="FULL", wal=True,
                              way_out=DAMAGED)
        self.db.execute(counters.EXPAND)  # expand-only: older guardians ignore it

    def close(self) -> None:
        self.db.close()

    def tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self.db)

    # -- releases and selector ----------------------------------------------------------

    def add_release(self, release_id: str) -> None:
        self.db.execute("INSERT OR IGNORE INTO releases VALUES (?, ?)", (release_id, time.time()))

    def releases(self) -> list[str]:
        """Installed releases, the first installed first (the order of the rows: a clock
        set back leaves it as it is)."""
        return [r[0] for r in self.db.execute("SELECT id FROM releases ORDER BY rowid")]

    def forget_release(self, release_id: str) -> None:
        """``release_id`` was removed: installing it again makes it the newest."""
        self.db.execute("DELETE FROM releases WHERE id = ?", (release_id,))

    def selector(self) -> Selector:
        r = self.db.execute("SELECT current, previous, revision FROM selector").fetchone()
        if not all(v is None or isinstance(v, str) for v in r[:2]) or \
                not is_count(r[2]):   # a damaged row: never compared as is
            raise _damaged("the release selector is damaged")
        return Selector(r[0], r[1], r[2])

    def _select(self, db: sqlite3.Connection, release: str, expected_revision: int) -> None:
        cur = db.execute(
            "UPDATE selector SET previous = CASE WHEN current = ? THEN previous ELSE current "
            "END, current = ?, revision = revision + 1 WHERE revision = ?",
            (release, release, expected_revision))
        if cur.rowcount != 1:
            raise Conflict("the selector moved meanwhile", {"revision": self.selector().revision})

    def select(self, release: str, expected_revision: int) -> Selector:
        """Compare-and-set the current release (the old current becomes previous)."""
        with self.tx() as db:
            self._select(db, release, expected_revision)
        return self.selector()

    # -- the installation lease -----------------------------------------------------------

    def take_lease(self, holder: Identity, purpose: str) -> None:
        """Raises OperationInProgress while a living holder has it; a dead holder's lease
        is recovered (its process and start time are gone)."""
        with self.tx() as db:
            r = db.execute("SELECT holder, pid, start_ticks, boot_id, purpose FROM lease"
                           ).fetchone()
            if r[0] is not None:
                other = Identity(r[0], r[1], r[2], r[3])
                if other.instance != holder.instance and other.is_alive():
                    raise OperationInProgress(f"{r[4]} holds the installation lease",
                                              {"purpose": r[4], "pid": r[1]})
            db.execute("UPDATE lease SET holder = ?, pid = ?, start_ticks = ?, boot_id = ?, "
                       "purpose = ?, acquired_at = ?",
                       (holder.instance, holder.pid, holder.start_ticks, holder.boot_id,
                        purpose, time.time()))

    def release_lease(self, holder: Identity) -> None:
        self.db.execute("UPDATE lease SET holder = NULL, pid = NULL, start_ticks = NULL, "
                        "boot_id = NULL, purpose = NULL, acquired_at = NULL WHERE holder = ?",
                        (holder.instance,))

    def lease(self) -> dict[str, Any] | None:
        r = self.db.execute("SELECT holder, pid, purpose, acquired_at FROM lease").fetchone()
        return None if r[0] is None else {"holder": r[0], "pid": r[1], "purpose": r[2],
                                          "acquired_at": r[3]}

    # -- grants ---------------------------------------------------------------------------

    def last_epoch(self) -> int:
        return int(self.db.execute("SELECT coalesce(max(epoch), 0) FROM grants").fetchone()[0])

    def grant_for(self, activation: str) -> int | None:
        """The epoch granted to ``activation``, or None if none was recorded."""
        r = self.db.execute("SELECT max(epoch) FROM grants WHERE activation = ?",
                            (activation,)).fetchone()
        return None if r is None or r[0] is None else int(r[0])

    def signed_grant(self, epoch: int) -> dict[str, Any] | None:
        """The signed grant of ``epoch`` as recorded (the owner's ``fence`` form), or
        None. A generation presents it on its owner connection."""
        r = self.db.execute("SELECT epoch, activation, release, owner_instance, issued_at, "
                            "sig FROM grants WHERE epoch = ?", (epoch,)).fetchone()
        if r is None:
            return None
        if type(r[0]) is not int or type(r[4]) not in (int, float) or \
                not isinstance(r[5], bytes):
            raise _damaged(f"the grant of epoch {epoch} is damaged", {"epoch": epoch})
        grant = Grant(r[0], str(r[1]), str(r[2]), str(r[3]), float(r[4]))
        return SignedGrant(grant, r[5]).to_wire()

    def record_grant(self, grant: Grant, sig: bytes) -> None:
        """Step one of every fence: the grant is durable before the owner hears of it."""
        try:
            self.db.execute("INSERT INTO grants VALUES (?, ?, ?, ?, ?, ?)",
                            (grant.epoch, grant.activation, grant.release,
                             grant.owner_instance, grant.issued_at, sig))
        except sqlite3.IntegrityError:
            raise Conflict(f"epoch {grant.epoch} was already granted") from None

    # -- activations ----------------------------------------------------------------------

    def create_activation(self, kind: Kind, release: str, from_release: str | None,
                          from_epoch: int | None, detail: dict[str, Any] | None = None
                          ) -> Activation:
        aid = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.urandom(4).hex()}"
        now = time.time()
        with self.tx() as db:
            db.execute(f"INSERT INTO activations ({_ACT_COLS}) VALUES "
                       "(?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, ?, NULL, ?, ?)",
                       (aid, kind, release, from_release, Phase.CREATED, from_epoch, now, now))
            self._receipt(db, aid, Phase.CREATED, {**(detail or {}), "kind": str(kind),
                                                   "release": release})
        return self.activation(aid)

    def activation(self, aid: str) -> Activation:
        r = self.db.execute(f"SELECT {_ACT_COLS} FROM activations WHERE id = ?",
                            (aid,)).fetchone()
        if r is None:
            raise NotFound(f"no activation {aid}", {"activation": aid})
        return _activation(r)

    def activations(self, limit: int = 20) -> list[Activation]:
        rows = self.db.execute(f"SELECT {_ACT_COLS} FROM activations "
                               "ORDER BY rowid DESC LIMIT ?", (limit,))
        return [_activation(r) for r in rows]

    def prune(self, keep: int, protect: set[str]) -> int:
        """Delete finished activations (complete, aborted, rolled back, failed) but the
        newest ``keep`` and those in ``protect``, with their receipts and grants; the
        newest grant always stays. ``uncertain`` and ``blocked`` ones wait for the
        operator and are never pruned. Returns how many activations were deleted."""
        done = [str(p) for p in (Phase.COMPLETE, Phase.ABORTED, Phase.ROLLED_BACK,
                                 Phase.FAILED)]
        marks = ", ".join("?" * len(done))
        with self.tx() as db:
            old = [a for (a,) in db.execute(
                f"SELECT id FROM activations WHERE phase IN ({marks}) AND id NOT IN "
                "(SELECT id FROM activations ORDER BY rowid DESC LIMIT ?)",
                (*done, keep)) if a not in protect]
            for aid in old:
                db.execute("DELETE FROM receipts WHERE activation = ?", (aid,))
                db.execute("DELETE FROM grants WHERE activation = ? AND epoch < "
                           "(SELECT max(epoch) FROM grants)", (aid,))
                db.execute("DELETE FROM activations WHERE id = ?", (aid,))
        return len(old)

    def activations_granted_after(self, epoch: int) -> list[Activation]:
        """Every activation that holds a grant newer than ``epoch``."""
        rows = self.db.execute(f"SELECT {_ACT_COLS} FROM activations WHERE id IN "
                               "(SELECT activation FROM grants WHERE epoch > ?) "
                               "ORDER BY rowid", (epoch,))
        return [_activation(r) for r in rows]

    def restorer_of(self, activation: str) -> Activation | None:
        """The restore activation started for a failed handoff, if any."""
        for (aid, detail) in self.db.execute(
                "SELECT r.activation, r.detail FROM receipts r JOIN activations a ON "
                "a.id = r.activation WHERE a.kind = ? AND r.seq = 1", (Kind.RESTORE,)):
            if _detail(detail).get("restores") == activation:
                return self.activation(aid)
        return None

    def restored_by(self, restore: str) -> str | None:
        """The failed handoff a restore activation restores from."""
        r = self.db.execute("SELECT detail FROM receipts WHERE activation = ? AND seq = 1",
                            (restore,)).fetchone()
        value = _detail(r[0]).get("restores") if r else None
        return value if isinstance(value, str) else None

    def open_activations(self) -> list[Activation]:
        rows = self.db.execute(f"SELECT {_ACT_COLS} FROM activations WHERE phase NOT IN "
                               f"({','.join('?' * len(FINAL))}) ORDER BY rowid",
                               tuple(FINAL))
        return [_activation(r) for r in rows]

    def advance(self, aid: str, expected: Phase, new: Phase, detail: dict[str, Any] | None
                = None, *, select: tuple[str, int] | None = None, **fields: Any) -> Activation:
        """Compare-and-set the phase, set ``fields`` and write the receipt, atomically.
        With ``select=(release, revision)`` the selector commits in the same transaction.
        Raises Conflict when the phase moved or the step is not in its kind's table."""
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.tx() as db:
            row = db.execute("SELECT kind FROM activations WHERE id = ?", (aid,)).fetchone()
            if row is None:
                raise NotFound(f"no activation {aid}", {"activation": aid})
            if not allowed(_kind(row[0]), expected, new):
                raise Conflict(f"phase {new} may not follow {expected} in a {row[0]} "
                               "activation", {"activation": aid})
            cur = db.execute(
                f"UPDATE activations SET phase = ?, updated_at = ?{', ' if sets else ''}{sets} "
                "WHERE id = ? AND phase = ?",
                (new, time.time(), *fields.values(), aid, expected))
            if cur.rowcount != 1:
                raise Conflict(f"activation {aid} is no longer in phase {expected}")
            if select is not None:
                self._select(db, *select)
            self._receipt(db, aid, new, {**(detail or {}), **fields})
            if new in FINAL:
                counters.record_end(db, aid)
        return self.activation(aid)

    def _receipt(self, db: sqlite3.Connection, aid: str, phase: Phase,
                 detail: dict[str, Any]) -> None:
        seq = db.execute("SELECT coalesce(max(seq), 0) + 1 FROM receipts WHERE activation = ?",
                         (aid,)).fetchone()[0]
        db.execute("INSERT INTO receipts VALUES (?, ?, ?, ?, ?)",
                   (aid, seq, phase, time.time(), json.dumps(detail, sort_keys=True)))

    def counters(self) -> dict[str, Any]:
        """Handoff outcomes and pauses counted so far (guardian.counters). Raises
        StateCorrupt for a damaged counter."""
        try:
            return counters.read(self.db)
        except ValueError as exc:
            raise _damaged(str(exc), {"what": "counters"}) from None

    def receipts(self, aid: str) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT seq, phase, at, detail FROM receipts WHERE activation "
                               "= ? ORDER BY seq", (aid,))
        return [{"seq": s, "phase": p, "at": a, "detail": _detail(d)} for s, p, a, d in rows]


def _detail(text: Any) -> dict[str, Any]:
    """A receipt's detail (a JSON map). Raises StateCorrupt for a damaged one."""
    value = json_map(text)
    if value is None:
        raise _damaged("a receipt's detail is not a JSON map")
    return value
