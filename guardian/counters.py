"""Handoff counters in state.db: how many hot handoffs ended with each outcome, and a
histogram of their control-plane pause (``tenure_handoffs_total``,
``tenure_handoff_pause_seconds``).

Counted once, when an activation reaches a final phase, in the same transaction as that
phase change: the counters are totals of their own rows, never recomputed from the
activations table, so pruning old activations never makes one go down. The table is an
expansion of the schema (``CREATE TABLE IF NOT EXISTS`` at every open, no format bump): a
guardian that predates it ignores it, and a database from before it starts at zero.

The pause is the time from the ``draining`` receipt (the incumbent starts refusing
requests) to the ``started`` receipt (the candidate's API is open), as bench/handoff.py
measures it from the client's side. Only a handoff that reached ``started`` has one.
"""

from __future__ import annotations

import math
import sqlite3
from typing import Any

from .phases import Kind, Outcome, Phase

__all__ = ["BUCKETS", "EXPAND", "read", "record_end"]

EXPAND = ("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, "
          "value REAL NOT NULL)")
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds of the pause histogram, in seconds (+Inf is implied)."""

_HOT = (Kind.UPGRADE, Kind.ROLLBACK)


def _add(db: sqlite3.Connection, name: str, value: float) -> None:
    db.execute("INSERT INTO counters VALUES (?, ?) ON CONFLICT(name) DO UPDATE "
               "SET value = value + excluded.value", (name, value))


def record_end(db: sqlite3.Connection, aid: str) -> None:
    """Count activation ``aid``, which just reached a final phase (inside the caller's
    transaction). Only hot handoffs count, and not ``--check`` (nothing was handed)."""
    kind, outcome = db.execute("SELECT kind, outcome FROM activations WHERE id = ?",
                               (aid,)).fetchone()
    if kind not in _HOT or outcome in (None, Outcome.CHECK_ONLY):
        return
    _add(db, f"outcome:{outcome}", 1)
    at = dict(db.execute("SELECT phase, min(at) FROM receipts WHERE activation = ? AND "
                         "phase IN (?, ?) GROUP BY phase",
                         (aid, Phase.DRAINING, Phase.STARTED)).fetchall())
    if Phase.DRAINING in at and Phase.STARTED in at:
        pause = max(0.0, at[Phase.STARTED] - at[Phase.DRAINING])
        _add(db, "pause:count", 1)
        _add(db, "pause:sum", pause)
        for le in BUCKETS:
            if pause <= le:
                _add(db, f"pause:le:{le}", 1)


def read(db: sqlite3.Connection) -> dict[str, Any]:
    """``{handoffs: {outcome: n}, pause: {buckets: [[le, cumulative n]...], sum, count}}``
    with every outcome and bucket present (zero where nothing was counted). Raises
    ValueError naming a counter whose value is no finite number of at least 0 (SQLite
    lets the column hold text: a damaged row)."""
    rows = dict(db.execute("SELECT name, value FROM counters").fetchall())
    for name, value in rows.items():
        if type(value) not in (int, float) or not 0 <= value < math.inf:
            raise ValueError(f"the counter {str(name)[:100]!r} is not a count")
    outcomes = [o for o in Outcome if o is not Outcome.CHECK_ONLY]
    return {"handoffs": {str(o): int(rows.get(f"outcome:{o}", 0)) for o in outcomes},
            "pause": {"buckets": [[le, int(rows.get(f"pause:le:{le}", 0))]
                                  for le in BUCKETS],
                      "sum": float(rows.get("pause:sum", 0.0)),
                      "count": int(rows.get("pause:count", 0))}}
