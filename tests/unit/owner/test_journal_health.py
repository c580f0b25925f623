"""owner.journalhealth: a run of failed journal writes is told when it begins, at most
every REMIND_S while it lasts and when it ends, not once per batch; and the journal
reports through it (a real journal whose inserts fail as on a full disk)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from owner.journal import Journal, LogSource
from owner.journalhealth import WriteHealth
from owner.journaltables import Tables

FULL = sqlite3.OperationalError("database or disk is full")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_run_of_failures_is_told_at_its_start_every_remind_s_and_at_its_end(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    h = WriteHealth(clock=clock, wall=lambda: 1000.0 + clock.t, remind_s=30.0)
    h.succeeded()
    assert h.to_wire() is None
    with caplog.at_level(logging.WARNING, "tenure.owner.journal"):
        for _ in range(100):            # a batch every 10 ms for a second
            h.failed(FULL, 3)
            clock.t += 0.01
        assert len(warnings(caplog)) == 1
        assert "journal writes fail (OperationalError: database or disk is full)" \
            in warnings(caplog)[0]
        assert h.to_wire() == {"error": "OperationalError: database or disk is full",
                               "since": 1100.0, "batches": 100, "lines": 300}
        clock.t += 30
        h.failed(OSError(28, "No space left on device"), 2)
        assert len(warnings(caplog)) == 2
        assert "still fail (OSError: [Errno 28] No space left on device): 101 batches, " \
               "302 lines dropped" in warnings(caplog)[1]
        h.failed(FULL, 1)               # within REMIND_S of the reminder: quiet
        assert len(warnings(caplog)) == 2
        h.succeeded()
        h.succeeded()
        assert len(warnings(caplog)) == 3
        assert "work again after 102 failed batches (303 lines dropped" \
            in warnings(caplog)[2]
        assert h.to_wire() is None
        h.failed(FULL, 1)               # a new run starts its own counts
        assert len(warnings(caplog)) == 4
    assert h.to_wire() is not None and h.to_wire()["batches"] == 1  # type: ignore[index]


def test_the_journal_reports_failed_writes_through_its_health(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    full = True
    real = Tables._insert

    def insert(self: Tables, conn: sqlite3.Connection, item: object) -> tuple[str, str]:
        if full:
            raise FULL
        return real(self, conn, item)  # type: ignore[arg-type]

    monkeypatch.setattr(Tables, "_insert", insert)
    src = LogSource("s", "a", 0, 1)
    with caplog.at_level(logging.WARNING, "tenure.owner.journal"), \
            Journal(tmp_path / "journal.db") as j:
        for i in range(20):
            j.append(src, "stdout", [(b"line %d" % i, 0)])
            assert j.flush(timeout=10)
        failing = j.health.to_wire()
        assert failing is not None and failing["lines"] == 20, failing
        assert j.dropped_by_app() == {("s", "a"): 20}
        assert len(warnings(caplog)) == 1
        full = False
        j.append(src, "stdout", [(b"written", 0)])
        assert j.flush(timeout=10)
        assert j.health.to_wire() is None
        assert "work again after" in warnings(caplog)[-1]


def test_a_failed_batch_is_counted_dropped_before_the_failure_shows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The owner's status reads the failure, then the dropped counts: a reader must
    never find a failure whose lines are not counted yet (seen as a missing key)."""
    def insert(self: Tables, conn: sqlite3.Connection, item: object) -> tuple[str, str]:
        raise FULL

    monkeypatch.setattr(Tables, "_insert", insert)
    src = LogSource("s", "a", 0, 1)
    seen: list[tuple[int, int]] = []
    with Journal(tmp_path / "journal.db") as j:
        real = j.health.failed

        def failed(exc: BaseException, lines: int) -> None:
            # the lock is the writer's here: read the counts without it
            counted = sum(n for (n,) in j._intake._dropped_by_app.sums().values())
            seen.append((counted, (j.health.to_wire() or {"lines": 0})["lines"] + lines))
            real(exc, lines)

        monkeypatch.setattr(j.health, "failed", failed)
        for i in range(3):
            j.append(src, "stdout", [(b"line %d" % i, 0), (b"more", 0)])
            assert j.flush(timeout=10)
    assert seen == [(2, 2), (4, 4), (6, 6)]
