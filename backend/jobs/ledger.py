"""The job ledger: tables of backend.db (SQLite, synchronous=FULL) holding every record.

A submission is committed before its id is returned (``admit``): one transaction looks
the dedup key up and inserts, so the same key always gives the same record and any
number of concurrent submissions of one key make one record. A key already used for a
different command, env or arguments is refused with ``CONFLICT`` naming the record.

Every later change of a record is a compare-and-set on its ``revision`` together with a
history row (``save``): a generation that lost track of a record (a stale one, after a
handoff) cannot overwrite what another wrote. Finished records are pruned by their
template's retention (``prune``); their dedup keys are kept, so a pruned key is never
admitted again as if new.

The tables are the ``jobs`` part of backend.db (``BackendStore.ensure_part``): a
database from before jobs existed opens and gains them.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
from collections.abc import Iterable
from typing import Any

from msgspec import Struct

from protocol.digest import JOB_LAUNCH_PREFIX
from protocol.errors import BadRequest, Conflict, JobQueueFull, NotFound, StateCorrupt
from protocol.schema import is_str_list

from ..model import canonical_digest
from ..store import BackendStore
from .machine import OPEN, TERMINAL, Event, Job, Missed, State
from .model import JobTemplate, Retention

log = logging.getLogger("tenure.jobs")

__all__ = ["FORMAT", "Admission", "Ledger", "Record", "fingerprint", "make_spec"]

FORMAT = 1
SCHEMA = """
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT UNIQUE, stack TEXT NOT NULL,
    template TEXT NOT NULL, fingerprint TEXT NOT NULL, spec TEXT NOT NULL,
    source TEXT NOT NULL, due_at REAL, state TEXT NOT NULL, revision INTEGER NOT NULL,
    wire TEXT NOT NULL, submitted_at REAL NOT NULL, ended_at REAL);
CREATE INDEX jobs_state ON jobs (state);
CREATE INDEX jobs_template ON jobs (stack, template, id);
CREATE TABLE job_history (
    job INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE, at REAL NOT NULL,
    event TEXT NOT NULL, from_state TEXT, to_state TEXT NOT NULL, detail TEXT);
CREATE INDEX job_history_job ON job_history (job);
CREATE TABLE job_schedules (
    template TEXT PRIMARY KEY, last_due REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE job_pruned_keys (
    key TEXT PRIMARY KEY, job INTEGER NOT NULL, fingerprint TEXT NOT NULL,
    outcome TEXT, pruned_at REAL NOT NULL);
CREATE TABLE job_ledger (id INTEGER PRIMARY KEY CHECK (id = 1), uid TEXT NOT NULL)
"""
# A part of its own (BackendStore.ensure_part adds it to a ledger of any age): the cron
# expression and time zone each mark counts in. A release that predates it never reads it.
FORMS_PART, FORMS_FORMAT = "job_schedule_forms", 1
FORMS_SCHEMA = "CREATE TABLE job_schedule_forms (template TEXT PRIMARY KEY, form TEXT NOT NULL)"
_COLS = ("id, key, stack, template, fingerprint, spec, source, due_at, revision, wire, "
         "submitted_at, state")


def make_spec(template: JobTemplate, args: Iterable[str] = ()) -> dict[str, Any]:
    """What a record runs, copied from its template at admission: argv (the template's
    command and then ``args``), env, cwd, timeout, stop policy and ``after`` apps."""
    identity = template.run_as.to_wire()
    return {"argv": [*template.command, *args], "args": list(args), "env": dict(template.env),
            "cwd": template.cwd, "timeout": template.timeout,
            "stop": template.stop.to_wire(), "after": list(template.after),
            **({"identity": identity} if identity else {})}


def fingerprint(stack: str, template: str, spec: dict[str, Any]) -> str:
    """What makes two submissions of one key the same: template, command with arguments,
    env, cwd and the identity (only when set, so records from before identities keep
    their fingerprints)."""
    form = {"stack": stack, "template": template, "argv": spec["argv"], "env": spec["env"],
            "cwd": spec["cwd"]}
    if spec.get("identity"):
        form["identity"] = spec["identity"]
    return canonical_digest(form)[:32]


class Admission(Struct, frozen=True):
    """One submission. ``due_at`` (wall clock) and ``mark`` belong to scheduled ones:
    ``mark`` advances the template's schedule in the same transaction. ``max_open``:
    refuse a new record while the template has that many open (a ``missed`` one, never
    open, is always recorded). ``evidence``: why a ``missed`` one did not run, when it is
    not the usual (no backend was up)."""

    stack: str
    template: str
    spec: dict[str, Any]
    key: str | None = None
    source: str = "api"
    due_at: float | None = None
    missed: bool = False
    mark: float | None = None
    max_open: int | None = None
    evidence: dict[str, Any] | None = None


class Record(Struct):
    id: int
    key: str | None
    stack: str
    template: str
    fingerprint: str
    spec: dict[str, Any]
    source: str
    due_at: float | None
    revision: int
    job: Job
    submitted_at: float

    @property
    def template_key(self) -> str:
        return f"{self.stack}/{self.template}"

    def to_wire(self) -> dict[str, Any]:
        """The public view (no env: it may hold secrets)."""
        job = self.job
        duration = None
        if job.started_at is not None:
            end = job.ended_at
            duration = None if end is None else round(max(0.0, end - job.started_at), 3)
        return {"id": self.id, "key": self.key, "stack": self.stack,
                "template": self.template, "state": job.state.value,
                "outcome": None if job.outcome is None else job.outcome.value,
                "attempt": job.attempt, "launch_key": job.launch_key, "pid": job.pid,
                "exit_code": job.exit_code, "signal": job.signal,
                "stop_reason": None if job.stop_reason is None else job.stop_reason.value,
                "argv": self.spec["argv"], "cwd": self.spec["cwd"],
                "identity": self.spec.get("identity") or {},
                "timeout": self.spec["timeout"], "after": self.spec["after"],
                "source": self.source, "due_at": self.due_at,
                "submitted_at": self.submitted_at, "started_at": job.started_at,
                "ended_at": job.ended_at, "duration": duration, "evidence": job.evidence,
                "resolution": job.resolution, "revision": self.revision}


class Ledger:
    """All access to the job tables, on the backend store's connection (one thread)."""

    def __init__(self, store: BackendStore) -> None:
        """Raises StateCorrupt for job tables of another format."""
        self.store = store
        self.db = store.db
        store.ensure_part("jobs", FORMAT, SCHEMA)
        store.ensure_part(FORMS_PART, FORMS_FORMAT, FORMS_SCHEMA)
        self.db.execute("INSERT OR IGNORE INTO job_ledger VALUES (1, ?)",
                        (os.urandom(4).hex(),))
        self.uid: str = self.db.execute("SELECT uid FROM job_ledger").fetchone()[0]

    @property
    def launch_prefix(self) -> str:
        """Launch keys are ``job:<ledger>:<id>:<attempt>``: unique even if backend.db were
        ever recreated while the owner keeps its launch keys forever. (No '/', so never
        the key of an app instance; the recovery certificate's digest leaves them out.)"""
        return f"{JOB_LAUNCH_PREFIX}{self.uid}"

    # -- admission --------------------------------------------------------------------

    def admit(self, a: Admission, now: float) -> tuple[Record, bool]:
        """Commit a new record, or return the one that holds ``a.key`` (deduplicated:
        True; answered even when the template is full). Raises Conflict when the key
        holds a different submission or names a pruned record, JobQueueFull when a new
        record would exceed ``a.max_open``; either changes nothing."""
        fp = fingerprint(a.stack, a.template, a.spec)
        with self.store.tx() as db:
            prior = None if a.key is None else self._by_key(db, a.key)
            if prior is not None:
                _same_or_conflict(prior.fingerprint, fp, str(a.key), prior.id, prior.state)
                self._mark(db, a, now)
                job_id = prior.id
            else:
                job_id = self._admit_new(db, a, fp, now)
        return self.get(job_id), prior is not None

    def _admit_new(self, db: sqlite3.Connection, a: Admission, fp: str, now: float
                   ) -> int:
        if a.key is not None:
            self._refuse_pruned(db, a.key, fp)
        if a.max_open is not None and not a.missed:
            self._refuse_full(db, a.stack, a.template, a.max_open)
        job_id = self._insert(db, a, fp, now)
        job = Job(job_id, a.stack, a.template, a.spec["timeout"])
        event = "admitted"
        if a.missed:
            job.handle(Missed(a.evidence), now, 0.0)
            event = "missed"
        db.execute("UPDATE jobs SET wire = ?, state = ?, ended_at = ? WHERE id = ?",
                   (json.dumps(job.to_wire()), job.state.value, job.ended_at, job_id))
        self._history(db, job_id, now, event, None, job.state, a.source)
        self._mark(db, a, now)
        return job_id

    def _insert(self, db: sqlite3.Connection, a: Admission, fp: str, now: float) -> int:
        cur = db.execute(
            "INSERT INTO jobs (key, stack, template, fingerprint, spec, source, due_at, "
            "state, revision, wire, submitted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, '{}', ?)",
            (a.key, a.stack, a.template, fp, json.dumps(a.spec, sort_keys=True), a.source,
             a.due_at, State.ADMITTED.value, now))
        assert cur.lastrowid is not None
        return cur.lastrowid

    def _refuse_pruned(self, db: sqlite3.Connection, key: str, fp: str) -> None:
        """Raises Conflict (``pruned``: True) when ``key`` was a pruned record's, whatever
        it was submitted with: that record no longer exists to be named as the key's."""
        row = db.execute("SELECT job, fingerprint, outcome FROM job_pruned_keys WHERE key = ?",
                         (key,)).fetchone()
        if row is None:
            return
        other = "" if row[1] == fp else " (with another command, env or arguments)"
        raise Conflict(f"key {key!r} was used by job {row[0]}{other}, which ended "
                       f"({row[2]}) and was pruned by its retention; a used key is never "
                       "admitted again", {"job": row[0], "key": key, "pruned": True})

    def _refuse_full(self, db: sqlite3.Connection, stack: str, template: str, cap: int
                     ) -> None:
        """Raises JobQueueFull when ``cap`` records of the template are open."""
        marks = ", ".join("?" * len(OPEN))
        (n,) = db.execute(f"SELECT count(*) FROM jobs WHERE stack = ? AND template = ? AND "
                          f"state IN ({marks})",
                          (stack, template, *(s.value for s in OPEN))).fetchone()
        if n >= cap:
            raise JobQueueFull(
                f"job template {stack}/{template} has {n} records open (admitted, starting "
                f"or running), its max_pending is {cap}: try again when some have ended",
                {"template": f"{stack}/{template}", "max_pending": cap, "open": n})

    def _mark(self, db: sqlite3.Connection, a: Admission, now: float) -> None:
        if a.mark is not None:
            db.execute("INSERT INTO job_schedules VALUES (?, ?, ?) ON CONFLICT(template) DO "
                       "UPDATE SET last_due = max(last_due, excluded.last_due), "
                       "updated_at = excluded.updated_at",
                       (f"{a.stack}/{a.template}", a.mark, now))

    # -- changes ----------------------------------------------------------------------

    def save(self, rec: Record, job: Job, event: Event | str, before: State, now: float,
             detail: dict[str, Any] | None = None) -> None:
        """Write ``job`` (already changed by the machine) if the record is still at
        ``rec.revision``, with a history row; advances ``rec``. Raises Conflict when
        another writer moved it (the caller must reload, not retry blindly)."""
        name = event if isinstance(event, str) else type(event).__name__
        with self.store.tx() as db:
            cur = db.execute(
                "UPDATE jobs SET wire = ?, state = ?, ended_at = ?, revision = revision + 1 "
                "WHERE id = ? AND revision = ?",
                (json.dumps(job.to_wire()), job.state.value, job.ended_at, rec.id,
                 rec.revision))
            if cur.rowcount != 1:
                raise Conflict(f"job {rec.id} changed meanwhile (revision {rec.revision})",
                               {"job": rec.id})
            self._history(db, rec.id, now, name, before, job.state, detail)
        rec.revision += 1
        rec.job = job

    def set_schedule_mark(self, template_key: str, due: float, now: float) -> None:
        stack, name = template_key.split("/", 1)
        with self.store.tx() as db:
            self._mark(db, Admission(stack, name, {}, mark=due), now)

    def restart_schedule(self, template_key: str, form: str, since: float, now: float
                         ) -> None:
        """Count the template's due times from ``since`` in ``form`` (its cron expression
        and time zone), in one transaction: it is seen for the first time, or its form
        changed. Unlike an admission's mark this may move the mark back or forth: the due
        times of the form before are none of this one's runs."""
        with self.store.tx() as db:
            self._restart(db, template_key, form, since, now)

    def _restart(self, db: sqlite3.Connection, template_key: str, form: str, since: float,
                 now: float) -> None:
        db.execute("INSERT INTO job_schedules VALUES (?, ?, ?) ON CONFLICT(template) DO "
                   "UPDATE SET last_due = excluded.last_due, "
                   "updated_at = excluded.updated_at", (template_key, since, now))
        self._set_form(db, template_key, form)

    def set_schedule_back(self, template_key: str, form: str, since: float, now: float
                          ) -> list[tuple[int, str]]:
        """The wall clock was set back behind the template's mark: count its due times
        from ``since`` again (:meth:`restart_schedule`) and, in the same transaction,
        release the keys of its ``missed`` records due after ``since``. Those were
        recorded while the clock was ahead, for due times that have not come yet: they
        never started, and their keys would make the real due times duplicates, never
        run. A released record stays ``missed``, without a key, with a history row
        ``KeyReleased`` naming the key; the due time runs once when the clock reaches
        it. Returns the (id, key) released."""
        stack, name = template_key.split("/", 1)
        with self.store.tx() as db:
            rows = db.execute(
                "SELECT id, key FROM jobs WHERE stack = ? AND template = ? AND "
                "source = 'schedule' AND state = ? AND due_at > ? AND key >= ? AND key < ? "
                "ORDER BY id", (stack, name, State.MISSED.value, since, *_SCHEDULE_KEYS)
            ).fetchall()
            for job_id, key in rows:
                db.execute("UPDATE jobs SET key = NULL, revision = revision + 1 WHERE id = ?",
                           (job_id,))
                self._history(db, job_id, now, "KeyReleased", State.MISSED, State.MISSED, {
                    "key": key, "reason": "recorded while the wall clock was ahead; it "
                    "was set back before this due time came: the due time runs when it "
                    "comes"})
            self._restart(db, template_key, form, since, now)
        return [(int(i), str(k)) for i, k in rows]

    def set_schedule_form(self, template_key: str, form: str) -> None:
        """Record the form a mark counts in (a mark from before forms were recorded)."""
        with self.store.tx() as db:
            self._set_form(db, template_key, form)

    def _set_form(self, db: sqlite3.Connection, template_key: str, form: str) -> None:
        db.execute("INSERT INTO job_schedule_forms VALUES (?, ?) ON CONFLICT(template) DO "
                   "UPDATE SET form = excluded.form", (template_key, form))

    def schedule_form(self, template_key: str) -> str | None:
        row = self.db.execute("SELECT form FROM job_schedule_forms WHERE template = ?",
                              (template_key,)).fetchone()
        return None if row is None else str(row[0])

    def forget_schedules(self, keep: set[str]) -> None:
        """Drop the marks (and forms) of templates that have no schedule any more (one
        added again later starts counting from then)."""
        gone = [t for (t,) in self.db.execute("SELECT template FROM job_schedules UNION "
                                              "SELECT template FROM job_schedule_forms")
                if t not in keep]
        if gone:
            with self.store.tx() as db:
                for table in ("job_schedules", "job_schedule_forms"):
                    db.executemany(f"DELETE FROM {table} WHERE template = ?",
                                   [(t,) for t in gone])

    def schedule_mark(self, template_key: str) -> float | None:
        """The last due time of the template handled (wall clock), None before its
        first. Raises StateCorrupt for a mark that is no time at all."""
        row = self.db.execute("SELECT last_due FROM job_schedules WHERE template = ?",
                              (template_key,)).fetchone()
        if row is None:
            return None
        mark = row[0]
        if isinstance(mark, int | float) and math.isfinite(mark) and mark >= 0:
            return float(mark)
        raise StateCorrupt(f"job {template_key}: the last due time of its schedule in "
                           f"backend.db is not a time ({type(mark).__name__})",
                           {"template": template_key})

    def _history(self, db: sqlite3.Connection, job_id: int, at: float, event: str,
                 before: State | None, after: State, detail: Any) -> None:
        db.execute("INSERT INTO job_history VALUES (?, ?, ?, ?, ?, ?)",
                   (job_id, at, event, None if before is None else before.value,
                    after.value, None if detail is None else json.dumps(detail)))

    # -- reading ----------------------------------------------------------------------

    def get(self, job_id: int) -> Record:
        """Raises NotFound, StateCorrupt (an unreadable row)."""
        rows = self._select("WHERE id = ?", (job_id,))
        if not rows:
            raise NotFound(f"no job {job_id}", {"job": job_id})
        return rows[0]

    def by_key(self, key: str) -> Record | None:
        """The record that holds the client key ``key``, if any. Raises StateCorrupt
        (an unreadable row)."""
        rows = self._select("WHERE key = ?", (key,))
        return rows[0] if rows else None

    def open_records(self) -> list[Record]:
        """Every record the runner drives (admitted, starting, running), oldest first.
        One this build cannot read is left out and logged: it is neither run nor
        stopped, and the others still are (it raised out of every later read before)."""
        marks = ", ".join("?" * len(OPEN))
        rows = self.db.execute(f"SELECT {_COLS} FROM jobs WHERE state IN ({marks}) "
                               "ORDER BY id", tuple(s.value for s in OPEN)).fetchall()
        out = []
        for r in rows:
            try:
                out.append(_record(r))
            except StateCorrupt as exc:
                log.error("%s; it is left as it is, and the other jobs run", exc.msg)
        return out

    def count(self, state: State) -> int:
        """How many records are in ``state`` (as their rows are indexed)."""
        (n,) = self.db.execute("SELECT count(*) FROM jobs WHERE state = ?",
                               (state.value,)).fetchone()
        return int(n)

    def records(self, *, stack: str | None = None, template: str | None = None,
                states: Iterable[str] = (), before: int | None = None, limit: int = 100
                ) -> list[Record]:
        """Newest first, filtered; ``before`` pages (ids below it)."""
        where: list[str] = ["1"]
        args: list[Any] = []
        for column, value in (("stack", stack), ("template", template)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        wanted = list(states)
        if wanted:
            where.append(f"state IN ({', '.join('?' * len(wanted))})")
            args += wanted
        if before is not None:
            where.append("id < ?")
            args.append(before)
        return self._select(f"WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
                            (*args, limit))

    def history(self, job_id: int) -> list[dict[str, Any]]:
        """The record's history rows, oldest first. Raises StateCorrupt for a row whose
        detail is not JSON (it was INTERNAL, a code that said nothing of the damage)."""
        rows = self.db.execute("SELECT at, event, from_state, to_state, detail FROM "
                               "job_history WHERE job = ? ORDER BY rowid", (job_id,))
        return [{"at": r[0], "event": r[1], "from": r[2], "to": r[3],
                 "detail": _detail(job_id, r[1], r[4])} for r in rows]

    def templates(self) -> list[tuple[str, str]]:
        """Every (stack, template) that has records."""
        return [(s, t) for s, t in self.db.execute(
            "SELECT DISTINCT stack, template FROM jobs ORDER BY stack, template")]

    def counts(self) -> dict[str, int]:
        return {s: n for s, n in self.db.execute(
            "SELECT state, count(*) FROM jobs GROUP BY state")}

    def _by_key(self, db: sqlite3.Connection, key: str) -> _Prior | None:
        row = db.execute("SELECT id, fingerprint, state FROM jobs WHERE key = ?",
                         (key,)).fetchone()
        return None if row is None else _Prior(row[0], row[1], row[2])

    def _select(self, where: str, args: tuple[Any, ...]) -> list[Record]:
        rows = self.db.execute(f"SELECT {_COLS} FROM jobs {where}", args).fetchall()
        return [_record(r) for r in rows]

    # -- retention --------------------------------------------------------------------

    def prune(self, stack: str, template: str, retention: Retention, now: float
              ) -> list[int]:
        """:meth:`prunable`, then :meth:`drop` them (output aside: backend.jobs.retention
        deletes it from the owner's journal in between)."""
        return self.drop(self.prunable(stack, template, retention, now), now)

    def prunable(self, stack: str, template: str, retention: Retention, now: float
                 ) -> list[int]:
        """This template's finished records beyond ``keep`` or that ended more than
        ``days`` ago, oldest first. Never an open or ``recovery_required`` one."""
        done = tuple(s.value for s in TERMINAL)
        marks = ", ".join("?" * len(done))
        base = f"stack = ? AND template = ? AND state IN ({marks})"
        ids: set[int] = set()
        if retention.keep is not None:
            ids |= {r[0] for r in self.db.execute(
                f"SELECT id FROM jobs WHERE {base} ORDER BY id DESC LIMIT -1 OFFSET ?",
                (stack, template, *done, retention.keep))}
        if retention.days is not None:
            ids |= {r[0] for r in self.db.execute(
                f"SELECT id FROM jobs WHERE {base} AND ended_at < ?",
                (stack, template, *done, now - retention.days * 86400))}
        return sorted(ids)

    def drop(self, ids: Iterable[int], now: float) -> list[int]:
        """Delete these records with their history in one transaction, keeping their
        keys (but a schedule's: its due times behind the template's mark are never
        admitted again, and a row per scheduled run grew backend.db by ~6 MiB a month
        for each every-minute schedule); one that is not finished (any more) stays.
        Returns the ids deleted."""
        done = tuple(s.value for s in TERMINAL)
        marks = ", ".join("?" * len(done))
        gone: list[int] = []
        with self.store.tx() as db:
            # (and those an older ledger kept: the key's range in its primary key)
            db.execute("DELETE FROM job_pruned_keys WHERE key >= ? AND key < ?",
                       _SCHEDULE_KEYS)
            for job_id in sorted(ids):
                db.execute(
                    "INSERT OR IGNORE INTO job_pruned_keys SELECT key, id, fingerprint, "
                    f"json_extract(wire, '$.outcome'), ? FROM jobs WHERE id = ? AND "
                    f"key IS NOT NULL AND NOT (key >= ? AND key < ?) AND state IN ({marks}) "
                    f"AND {_WIRE_STATE} = state", (now, job_id, *_SCHEDULE_KEYS, *done))
                cur = db.execute(f"DELETE FROM jobs WHERE id = ? AND state IN ({marks}) "
                                 f"AND {_WIRE_STATE} = state", (job_id, *done))
                if cur.rowcount == 1:
                    gone.append(job_id)
        return gone


_SCHEDULE_KEYS = ("schedule:", "schedule;")
"""The range of schedule keys (jobs.schedule.SCHEDULE_KEY_PREFIX; ';' follows ':')."""


class _Prior(Struct, frozen=True):
    id: int
    fingerprint: str
    state: str


def _same_or_conflict(prior_fp: str, fp: str, key: str, job_id: int, state: str | None
                      ) -> None:
    if prior_fp != fp:
        raise Conflict(f"key {key!r} belongs to job {job_id} ({state}), submitted with "
                       "another command, env or arguments", {"job": job_id, "key": key})


_WIRE_STATE = "CASE WHEN json_valid(wire) THEN json_extract(wire, '$.state') END"
"""The state a row's wire holds, NULL for one that is no JSON (json_extract raises)."""


def _detail(job_id: int, event: object, raw: object) -> Any:
    """A history row's detail, decoded. Raises StateCorrupt naming the job and the
    row's event."""
    if not raw:
        return None
    try:
        return json.loads(raw)   # type: ignore[arg-type]
    except (ValueError, TypeError) as exc:
        raise StateCorrupt(f"job {job_id}: its history row {event!r} in backend.db is "
                           f"unreadable: {type(exc).__name__}", {"job": job_id}) from exc


def _record(r: tuple[Any, ...]) -> Record:
    """Raises StateCorrupt for a row this build cannot read (never replaced): a wire or a
    spec of another shape, or a wire whose state is not the row's (the state column
    decides which records run and which retention deletes)."""
    try:
        job = Job.from_wire(json.loads(r[9]))
        spec = _spec(json.loads(r[5]))
        if r[11] != job.state.value:
            raise ValueError(f"its state is {str(r[11])[:50]!r}, its wire's "
                             f"{job.state.value!r}")
    except (ValueError, BadRequest) as exc:
        raise StateCorrupt(f"job {r[0]} in backend.db is unreadable: {exc}",
                           {"job": r[0]}) from None
    return Record(id=r[0], key=r[1], stack=r[2], template=r[3], fingerprint=r[4],
                  spec=spec, source=r[6], due_at=r[7], revision=r[8], job=job,
                  submitted_at=r[10])


def _spec(spec: Any) -> dict[str, Any]:
    """``spec`` when it has :func:`make_spec`'s shape (what the runner reads of it:
    argv, env, cwd, timeout, stop, after, identity). Raises ValueError naming the field
    that has not."""
    if type(spec) is not dict:
        raise ValueError("its spec is no map")
    checks = {
        "argv": is_str_list(spec.get("argv")) and bool(spec.get("argv")),
        "env": type(spec.get("env")) is dict
        and all(type(k) is str and type(v) is str for k, v in spec["env"].items()),
        "cwd": spec.get("cwd") is None or type(spec.get("cwd")) is str,
        "timeout": spec.get("timeout") is None
        or type(spec.get("timeout")) in (int, float),
        "stop": type(spec.get("stop")) is dict,
        "after": is_str_list(spec.get("after")),
        "identity": type(spec.get("identity", {})) is dict}
    bad = [name for name, ok in checks.items() if not ok]
    if bad:
        raise ValueError(f"its spec's {bad[0]} is not of its type")
    return spec
