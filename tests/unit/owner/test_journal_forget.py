"""Journal.forget over real SQLite: it deletes exactly the named (stack, app, instance)
sources, every generation of them, keeps the extents' byte counts equal to the rows
(so per-app retention still works), is idempotent, writes what was still queued first,
and goes in steps whose deletes stay when a later one fails."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from owner import journaltables
from owner.journal import Journal, LogSource
from owner.journaldb import record_cost
from owner.testing import read_all
from protocol.errors import BadRequest, ShuttingDown, StorageFailed

JOB1 = LogSource("s", "job:migrate", 1, 1)
JOB1_RETRY = LogSource("s", "job:migrate", 1, 2)      # attempt 2 of the same record
JOB2 = LogSource("s", "job:migrate", 2, 1)
WEB = LogSource("s", "web", 1, 1)                     # instance 1 of another app


def fill(j: Journal, n: int = 30) -> None:
    for i in range(n):
        for src in (JOB1, JOB2, WEB, JOB1_RETRY):
            j.append(src, "stdout", [(b"%s %d %d " % (src.app.encode(), src.instance, i)
                                      + b"." * (i % 13), 0)])


def extents_match_rows(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        real = dict(((s, a), n + rows * record_cost(s, a)) for s, a, n, rows in conn.execute(
            "SELECT stack, app, SUM(length(data)), count(*) FROM records GROUP BY stack, app"))
        kept = dict(((s, a), n) for s, a, n in conn.execute(
            "SELECT stack, app, SUM(bytes) FROM extents GROUP BY stack, app"))
        empty = conn.execute(
            "SELECT count(*) FROM extents e WHERE NOT EXISTS (SELECT 1 FROM records r "
            "WHERE r.id BETWEEN e.first_id AND e.last_id AND r.stack = e.stack AND "
            "r.app = e.app)").fetchone()[0]
    finally:
        conn.close()
    assert real == kept and empty == 0


def test_forget_deletes_exactly_the_named_instances_and_is_idempotent(tmp_path: Path
                                                                      ) -> None:
    path = tmp_path / "journal.db"
    with Journal(path, retention_bytes_per_app=10_000) as j:
        fill(j)                                 # the last lines are still queued: written first
        assert j.forget([("s", "job:migrate", 1)]) == 60       # both attempts
        left = read_all(j)
        assert len(left) == 60
        assert {(r.app, r.instance) for r in left} == {("job:migrate", 2), ("web", 1)}
        assert len(read_all(j, app="job:migrate", instance=2)) == 30
        assert len(read_all(j, app="web", instance=1)) == 30  # same instance, other app
        assert j.forget([("s", "job:migrate", 1)]) == 0       # again: nothing left
        assert j.forget([("s", "job:nothing", 7), ("other", "web", 1)]) == 0
        assert read_all(j) == left
        last = j.last_id()
    extents_match_rows(path)
    with Journal(path, retention_bytes_per_app=2_000) as j:   # the budget still holds
        for _ in range(100):
            j.append(JOB2, "stdout", [(b"x" * 50, 0)])
        j.append(WEB, "stdout", [(b"after", 0)])
        assert j.flush(timeout=30)
        assert 0 < sum(len(r.data) for r in read_all(j, app="job:migrate")) <= 2_000
        assert j.read(last, 1)[0].id > last                   # ids never reused
    extents_match_rows(path)


def test_a_forget_that_fails_keeps_the_apps_before_it_and_names_where_it_stopped(
        tmp_path: Path) -> None:
    """Each app's sources go in transactions of their own (owner.journaltables.STEP_BYTES):
    an error stops the forget there, what went before stays gone, and a retry goes on."""
    path = tmp_path / "journal.db"
    with Journal(path) as j:
        fill(j, 5)
        assert j.flush(timeout=30)
        web = read_all(j, app="web")
        conn = sqlite3.connect(path)
        conn.execute("CREATE TRIGGER boom BEFORE DELETE ON extents WHEN OLD.app = 'web' "
                     "BEGIN SELECT RAISE(ABORT, 'injected'); END")
        conn.commit()
        with pytest.raises(StorageFailed, match="forgetting s/web/1 failed"):
            j.forget([("s", "web", 1), ("s", "job:migrate", 1)])   # in (stack, app) order
        assert read_all(j, app="web") == web
        assert {r.instance for r in read_all(j, app="job:migrate")} == {2}
        j.append(WEB, "stdout", [(b"still writing", 0)])
        assert j.flush(timeout=30)
        assert read_all(j)[-1].data == b"still writing"
        conn.execute("DROP TRIGGER boom")
        conn.commit()
        conn.close()
        assert j.forget([("s", "web", 1), ("s", "job:migrate", 1)]) == 6
        assert read_all(j, app="web") == []
    extents_match_rows(path)


def test_forget_in_small_steps_deletes_exactly_the_named_instances(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps of a few records cut extents that hold the app's other instances too, and
    stop between two records of one source."""
    monkeypatch.setattr(journaltables, "STEP_BYTES", 150)   # about 2 records of an app
    path = tmp_path / "journal.db"
    with Journal(path, retention_bytes_per_app=1 << 20) as j:
        fill(j)
        assert j.flush(timeout=30)
        jobs = [r for r in read_all(j, app="job:migrate") if r.instance == 2]
        web = read_all(j, app="web")
        assert j.forget([("s", "job:migrate", 1), ("s", "web", 7)]) == 60
        assert read_all(j, app="job:migrate") == jobs and read_all(j, app="web") == web
        extents_match_rows(path)
        assert j.forget([("s", "job:migrate", 1)]) == 0
        fill(j, 3)                          # lines after it are kept, in extents of their own
        assert j.forget_apps([("s", "job:migrate")]) == 30 + 9
        assert read_all(j, app="job:migrate") == [] and len(read_all(j, app="web")) == 33
        assert [a[:2] for a in j.apps()] == [("s", "web")]
    extents_match_rows(path)


@pytest.mark.parametrize("source", [("", "a", 1), ("s", "a\x00", 1), ("s", "a", -1),
                                    ("s", "a", True)])
def test_forget_validates_sources_and_a_closed_journal_refuses(tmp_path: Path,
                                                               source: tuple) -> None:
    j = Journal(tmp_path / "journal.db")
    try:
        with pytest.raises(BadRequest):
            j.forget([source])
    finally:
        j.close()
    with pytest.raises(ShuttingDown):   # the owner is stopping
        j.forget([("s", "a", 1)])
