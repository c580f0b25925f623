"""The event log: what happened to each instance and to the control plane, in order,
for ``tenure events`` (alerting scripts, log shippers, people).

Events are recorded as they happen into a buffer and written to the ``events`` part of
backend.db by the generation's persist round (every 0.5 s, one transaction): a crash
can cost the events of that last half second, never a half-written one. Every event
gets an id that only grows (AUTOINCREMENT: never reused after pruning), so a reader
resumes exactly after the last id it saw, across backend handoffs and restarts (every
generation writes the same table). The newest KEEP events are kept; a reader that asks
for events already pruned is told so (``gap``).

Kinds and their ``data`` (docs/cli.md, ``tenure events``):

- ``state``: an instance's public state changed: ``from``, ``to``, ``reason``;
- ``exit``: its process ended: ``pid``, ``exit_code``, ``signal``, ``core_dumped``,
  ``requested`` (tenure stopped it);
- ``restart``: tenure starts it again after an exit: ``restarts`` (the count), ``delay``;
- ``probe``: a readiness or health check failed: ``check``, ``text``;
- ``operation``: an applied plan's operation began or ended: ``id``, ``phase``,
  ``outcome``, ``error``;
- ``handoff``: this backend's part in a handoff: ``phase`` (``draining``, ``drained``,
  ``resumed``, ``checkpointed``, ``retiring`` for an incumbent; ``adopted`` for the
  generation that took over), ``activation``, ``epoch``;
- ``queued-config``: a config `tenure up --no-wait` queued was taken (backend.spool):
  ``outcome`` (``admitted``, ``no-change``, ``rejected``), ``request_id``, ``source``,
  ``operation``, or ``code`` and ``file`` when rejected;
- ``lost``: events recorded while the log could not be written, dropped once the buffer
  held MAX_BUFFER: ``count``, ``first_at`` and ``last_at`` (when the first and the last
  of them happened). Written by the first write that works again, where they would have
  been (before the events that survived them); a read says how many its range lost
  (``lost``), whatever its filters.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import explain
from . import instance as im

if TYPE_CHECKING:
    from .store import BackendStore

__all__ = ["COLUMNS", "KINDS", "EventLog", "event_from_row", "moment", "request_event",
           "wanted"]

PART, FORMAT = "events", 1
SCHEMA = """
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL,
    kind TEXT NOT NULL, target TEXT, activation TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX events_kind ON events (kind, id)
"""
KINDS = ("state", "exit", "restart", "probe", "operation", "handoff", "queued-config",
         "lost")
LOST = "lost"
KEEP = 100_000          # newest events kept
PRUNE_EVERY = 1_000     # events written between two prunes
MAX_BUFFER = 50_000     # events held between writes; beyond it the oldest are counted lost
SCAN = 10_000           # rows one read looks at (filters may keep fewer)
COLUMNS = "id, at, kind, target, activation, data"   # a row, as event_from_row reads it

log = logging.getLogger("tenure.backend")


class EventLog:
    def __init__(self, store: BackendStore, activation: str,
                 clock: Callable[[], float] = time.time) -> None:
        store.ensure_part(PART, FORMAT, SCHEMA)
        self.db = store.db
        self._tx = store.tx
        self.activation = activation
        self.clock = clock
        self._buffer: deque[tuple[float, str, str | None, str]] = deque(maxlen=MAX_BUFFER)
        self.lost = 0                    # events dropped because the buffer was full
        self._dropped = 0                # of them, those no ``lost`` event has told yet
        self._dropped_at = (0.0, 0.0)    # when the first and the last of those happened
        self._telling = 0                # of those, what the pending write() tells
        self._since_prune = 0
        self._targets: set[str] | None = None   # every instance key with events, once asked
        self.exits_told: dict[str, int] = {}    # instance key -> pid of its last exit event

    def record(self, kind: str, target: str | None = None, /, **data: Any) -> None:
        """Remember one event (written by the next :meth:`flush`). Never raises."""
        self.record_at(self.clock(), kind, target, **data)

    def record_at(self, at: float | None, kind: str, target: str | None = None, /,
                  **data: Any) -> None:
        """:meth:`record` for an event that happened at ``at``, before this generation
        heard of it (an exit while no backend watched, or told by the owner's backlog);
        ``at`` None or not a finite time (:func:`moment`): now. Its id still comes
        after the events recorded before it, so it may be earlier than they are."""
        at = moment(at)
        if at is None:
            at = self.clock()
        if len(self._buffer) == self._buffer.maxlen:         # the append drops the oldest
            dropped_at = self._buffer[0][0]
            self.lost += 1
            self._dropped += 1
            self._dropped_at = (dropped_at if self._dropped == 1 else self._dropped_at[0],
                                dropped_at)
        self._buffer.append((at, kind, target, json.dumps(data, sort_keys=True)))
        if target is not None and self._targets is not None:
            self._targets.add(target)

    def targets(self) -> set[str]:
        """Every instance key the log has events of (removed instances included): read
        once, at the first ask, then kept as events are recorded. Raises sqlite3.Error."""
        if self._targets is None:
            self._targets = {t for (t,) in self.db.execute(
                "SELECT DISTINCT target FROM events WHERE target IS NOT NULL")}
            self._targets.update(t for _, _, t, _ in self._buffer if t is not None)
        return self._targets

    def flush(self) -> int:
        """Write the buffered events in one transaction; prune now and then. Returns how
        many were written. Raises sqlite3.Error (the events stay buffered)."""
        written = self.write()
        self.written(written)
        return written

    def write(self) -> int:
        """Insert the buffered events in a transaction (a savepoint of one already open:
        they are durable with it), keeping them buffered: :meth:`written` forgets them
        once that is committed. Events dropped from a full buffer are told first, by one
        ``lost`` event: its id is where they would have been. Returns how many rows.
        Raises sqlite3.Error (none inserted)."""
        self._telling = 0
        if not self._buffer and not self._dropped:
            return 0
        rows = [(at, kind, target, self.activation, data)
                for at, kind, target, data in self._buffer]
        if self._dropped:
            first, last = self._dropped_at
            rows.insert(0, (last, LOST, None, self.activation, json.dumps(
                {"count": self._dropped, "first_at": first, "last_at": last},
                sort_keys=True)))
        with self._tx() as db:
            db.executemany("INSERT INTO events (at, kind, target, activation, data) "
                           "VALUES (?, ?, ?, ?, ?)", rows)
            if self._since_prune + len(rows) >= PRUNE_EVERY:
                db.execute("DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - ?",
                           (KEEP,))
        self._telling = self._dropped
        return len(rows)

    def pending(self) -> int:
        """How many events wait to be written (a ``lost`` one included)."""
        return len(self._buffer) + (1 if self._dropped else 0)

    def written(self, count: int) -> None:
        """The ``count`` oldest rows of the last :meth:`write` are committed: forget
        them (and the drops its ``lost`` event told, said once in the log here)."""
        if count and self._telling:
            log.warning("the event log lost %d events recorded while it could not be "
                        "written (its buffer holds %d); a `lost` event says so",
                        self._telling, MAX_BUFFER)
            self._dropped -= self._telling
            count -= 1
        self._telling = 0
        for _ in range(count):
            self._buffer.popleft()
        self._since_prune = 0 if self._since_prune + count >= PRUNE_EVERY \
            else self._since_prune + count

    def bounds(self) -> tuple[int, int]:
        """(oldest id kept, newest id), (0, 0) when there is none."""
        first, last = self.db.execute("SELECT MIN(id), MAX(id) FROM events").fetchone()
        return (first or 0, last or 0)

    def read(self, *, after: int | None = None, tail: int | None = None, limit: int = 1000,
             targets: set[str] | None = None, kinds: set[str] | None = None,
             since_time: float | None = None) -> dict[str, Any]:
        """Events after the id ``after`` (or at/after ``since_time``, or the last
        ``tail`` that match), oldest first, at most ``limit`` (the oldest ``limit`` of a
        longer tail: the rest follow ``next``), filtered by instance key and kind.
        ``next`` is the id to read after next time; ``more`` says whether rows past it
        exist; ``gap`` that events after ``after`` were already pruned; ``lost`` how
        many events of the range read were dropped unwritten (``lost`` events, counted
        whatever the filters: a reader of one instance may have lost some of its own)."""
        first, last = self.bounds()
        if tail is not None:   # a page of them, oldest first; the rest are read `after`
            events = self._tail(tail, last, targets, kinds)
            nxt = last
            if len(events) > limit:
                events = events[:limit]
                nxt = events[-1]["id"]
            lo = events[0]["id"] - 1 if events else nxt
            return _answer(events, nxt, last, first, gap=False,
                           lost=self._lost_between(lo, nxt))
        if after is None:
            after = self._before_time(since_time or 0.0)
        gap = 0 < after < first - 1
        scanned = self.db.execute(
            f"SELECT {COLUMNS} FROM events WHERE id > ? "
            "ORDER BY id LIMIT ?", (after, SCAN)).fetchall()
        events, nxt = [], after
        for row in scanned:
            if len(events) >= limit:
                break
            nxt = row[0]
            if wanted(row, targets, kinds):
                events.append(event_from_row(row))
        return _answer(events, nxt, last, first, gap=gap,
                       lost=self._lost_between(after, nxt))

    def _lost_between(self, after: int, upto: int) -> int:
        """How many events the ``lost`` events of ids ``after`` < id <= ``upto`` tell
        of (a damaged one: none)."""
        total = 0
        for (data,) in self.db.execute("SELECT data FROM events WHERE kind = ? AND id > ? "
                                       "AND id <= ?", (LOST, after, upto)):
            try:
                count = json.loads(data).get("count")
            except (TypeError, ValueError, RecursionError, AttributeError):
                continue
            total += count if type(count) is int and count > 0 else 0
        return total

    def _tail(self, n: int, last: int, targets: set[str] | None,
              kinds: set[str] | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        below = last + 1
        while len(out) < n and below > 1:
            rows = self.db.execute(
                f"SELECT {COLUMNS} FROM events WHERE id < ? "
                "ORDER BY id DESC LIMIT ?", (below, SCAN)).fetchall()
            if not rows:
                break
            below = rows[-1][0]
            out.extend(event_from_row(r) for r in rows if wanted(r, targets, kinds))
        return list(reversed(out[:n]))

    def _before_time(self, t: float) -> int:
        """The id just before the first event at or after ``t`` (ids follow time)."""
        row = self.db.execute("SELECT MIN(id) FROM events WHERE at >= ?", (t,)).fetchone()
        if row[0] is None:
            return self.bounds()[1]
        return int(row[0]) - 1


def moment(value: Any) -> float | None:
    """``value`` as a time to record an event at: a finite number of seconds (the
    owner's ``at``, a launch's ``ended_at``), else None (missing, damaged, a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value):
        return None
    return float(value)


def request_event(db_path: str, kind: str, request_id: str) -> dict[str, Any] | None:
    """The ``data`` of the newest ``kind`` event of request ``request_id`` written to
    the event log of backend.db at ``db_path`` (read only: what a generation still
    buffers is not there); None when there is none, no backend.db or no log yet. A
    damaged row is skipped. Raises UnsafePath, sqlite3.Error."""
    from protocol.durable import read_rows
    if read_rows(db_path, "SELECT 1 FROM sqlite_master WHERE name = 'events'") in (None, []):
        return None
    rows = read_rows(db_path, f"SELECT data FROM events WHERE kind = {_quoted(kind)} "
                              "ORDER BY id DESC") or []
    for (data,) in rows:
        try:
            value = json.loads(data)
        except (TypeError, ValueError, RecursionError):
            continue
        if type(value) is dict and value.get("request_id") == request_id:
            return value
    return None


def _quoted(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def wanted(row: tuple[Any, ...], targets: set[str] | None, kinds: set[str] | None
           ) -> bool:
    """Whether a row of COLUMNS is of one of the instance keys ``targets`` and of one of
    the ``kinds`` (None: any)."""
    return (targets is None or row[3] in targets) and (kinds is None or row[2] in kinds)


def event_from_row(row: tuple[Any, ...]) -> dict[str, Any]:
    """The event of a row of COLUMNS. Raises StateCorrupt naming it for a damaged row (a
    column of another type, data that is no JSON object): every read that reaches it
    fails the same way, and the events before and after it still read."""
    ev_id, at, kind, target, activation, data = row
    try:
        value = json.loads(data)
    except (TypeError, ValueError, RecursionError):
        value = None
    if type(value) is not dict or type(ev_id) is not int or type(at) not in (int, float) \
            or type(kind) is not str or type(target) not in (str, type(None)) \
            or type(activation) not in (str, type(None)):
        from protocol.errors import StateCorrupt

        from .store import DAMAGED
        raise StateCorrupt(f"backend.db: event {str(ev_id)[:50]} cannot be read; {DAMAGED}",
                           {"what": f"event {str(ev_id)[:50]}"})
    return {"id": ev_id, "at": at, "kind": kind, "target": target,
            "activation": activation, "data": value}


def _answer(events: list[dict[str, Any]], nxt: int, last: int, first: int, *, gap: bool,
            lost: int) -> dict[str, Any]:
    return {"events": events, "next": nxt, "more": nxt < last, "first_id": first,
            "last_id": last, "gap": gap, "lost": lost}



def _exit(log: EventLog, key: str, pid: int, code: int | None, sig: int | None,
          core: bool, *, requested: bool, left_running: int = 0,
          at: float | None = None) -> None:
    """The ``exit`` event of process ``pid`` of instance ``key``, told once: an exit
    that reaches an instance with no process (its stop already settled it) is not one.
    ``left_running``: processes of the run that outlived it (said only when some did).
    ``at``: when the owner saw it end (None: now), also when this generation hears of
    it late (the owner's backlog replayed after a backend outage)."""
    log.exits_told[key] = pid
    extra = {"left_running": left_running} if left_running else {}
    log.record_at(at, "exit", key, pid=pid, exit_code=code, signal=sig,
                  core_dumped=core, requested=requested, **extra)


class Before:
    """What a transition is compared with: the instance as it was before one event."""

    __slots__ = ("pid", "probe", "public", "restarts", "state")

    def __init__(self, inst: Any) -> None:
        self.public, self.state, self.pid = inst.public_state, inst.state, inst.pid
        self.restarts = inst.restarts
        self.probe = None if inst.last_probe is None else inst.last_probe.text


def transition_events(log: EventLog, key: str, inst: Any, event: Any, was: Before) -> None:
    """Record what one machine event did to instance ``key``: its exit, a restart, a
    new failing probe result, a change of public state (in that order). An adopted
    process (a handoff or recovery) is no news: the ``handoff`` event says it."""
    if isinstance(event, im.Adopt):
        return
    ended = isinstance(event, im.Exited | im.OwnerStopped)
    pid = was.pid
    if ended and pid is None and was.state is im.State.STARTING:
        pid = event.pid   # it overtook its launch's answer: the owner's word for the pid
    if ended and pid is not None:
        _exit(log, key, pid, event.exit_code, event.signal, event.core_dumped,
              requested=isinstance(event, im.OwnerStopped)
              or was.state in (im.State.STOPPING, im.State.RESTARTING),
              left_running=event.left_running, at=event.at)
    elif isinstance(event, im.Stopped) and event.exit is not None and was.pid is not None \
            and log.exits_told.get(key) != was.pid:
        # the stop's answer came before the exit's observation (a drain held it back)
        ex = event.exit
        _exit(log, key, was.pid, ex.get("exit_code"), ex.get("signal"),
              ex.get("core_dumped") is True, requested=True)
    if inst.restarts > was.restarts:
        log.record("restart", key, restarts=inst.restarts, generation=inst.generation)
    probe = inst.last_probe
    if isinstance(event, im.Probed) and probe is not None and probe.text != was.probe:
        log.record("probe", key, check=str(probe.check), text=probe.text)
    if inst.public_state != was.public:
        to = inst.public_state
        why = explain.reason(inst) if to in (im.PublicState.FAILED,
                                             im.PublicState.BACKOFF) else None
        log.record("state", key, **{"from": str(was.public), "to": str(to), "reason": why})
