"""journal.db gives free pages back (owner.journalvacuum): after a smaller budget or a
``logs.forget`` the file shrinks once the writer is idle, lines that come meanwhile are
written whole, a flood's own pruning (under the slack) leaves the file as it is, and a
journal of an older owner (no free-page map) is rewritten once when small enough, kept as
it is when not. Was: the file never shrank."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from owner import journaldb, journalvacuum
from owner.journal import Journal, LogSource
from owner.journaldb import on_disk
from owner.journalvacuum import GiveBack, Pages, pages
from owner.testing import fill_journal, journal_kept

MIB = 1 << 20
WEB, DB = LogSource("s", "web", 0, 1), LogSource("s", "db", 0, 1)


def _settled(j: Journal, timeout: float = 20.0) -> None:
    """Wait until the writer has nothing left to give back (or waits after a failure)
    and has emptied the WAL."""
    deadline = time.monotonic() + timeout
    while j._give_back.pending() or j._ckpt.owed():
        assert time.monotonic() < deadline, "the writer did not give the pages back"
        time.sleep(0.01)


def _mode(path: Path) -> Pages:
    conn = sqlite3.connect(path)
    try:
        return pages(conn)
    finally:
        conn.close()



def test_a_smaller_budget_gives_the_pages_back_and_keeps_every_line_it_keeps(
        tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with Journal(path) as j:
        assert _mode(path).incremental   # a new journal maps its pages
        fill_journal(j, WEB, 24)
        fill_journal(j, DB, 2)
        assert on_disk(path) > 24 * MIB
        last = j.last_id()
        j.set_retention({("s", "web"): MIB})   # ~23 MiB freed
        _settled(j)
        assert on_disk(path) < 4 * MIB, on_disk(path)
        assert MIB // 2 <= journal_kept(j, "web") <= MIB and journal_kept(j, "db") == 2 * MIB
        assert j.last_id() == last
        fill_journal(j, WEB, 2)   # and it goes on as before
        assert journal_kept(j, "web") <= MIB and j.last_id() == last + 128
    assert _mode(path).free <= journalvacuum.SLACK_PAGES


def test_forgetting_sources_gives_the_pages_back(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with Journal(path) as j:
        fill_journal(j, WEB, 16)
        fill_journal(j, DB, 1)
        assert j.forget([("s", "web", 0)]) == 16 * 64
        _settled(j)
        assert on_disk(path) < 3 * MIB, on_disk(path)
        assert journal_kept(j, "db") == MIB


def test_a_flood_at_its_budget_leaves_the_file_as_it_is(tmp_path: Path) -> None:
    """Pruning as it goes frees about a batch at a time, under the slack: nothing is given
    back, so the file is not shrunk only to grow again."""
    path = tmp_path / "j.db"
    with Journal(path, retention_bytes_per_app=4 * MIB) as j:
        fill_journal(j, WEB, 12)
        _settled(j)
        assert j._give_back.released == 0
        assert on_disk(path) > 4 * MIB


def test_lines_that_come_while_pages_go_back_are_written_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journalvacuum, "STEP_PAGES", 8)   # many steps: lines come between
    path = tmp_path / "j.db"
    with Journal(path) as j:
        fill_journal(j, WEB, 24)
        first = j.last_id()
        j.set_retention({("s", "web"): MIB})
        for i in range(2000):
            j.append(DB, "stdout", [(b"line %d" % i, 0)])
            if i % 100 == 0:
                time.sleep(0.005)
        assert j.flush(timeout=60)
        _settled(j)
        assert [r.data for r in j.read(first, 100_000, app="db")] == \
            [b"line %d" % i for i in range(2000)]
        assert on_disk(path) < 4 * MIB, on_disk(path)
        assert j._give_back.released > 8 * 64   # in many steps


def _older_journal(path: Path, monkeypatch: pytest.MonkeyPatch, mib: int) -> None:
    """A journal as an owner before free pages were given back made it: no page map."""
    with monkeypatch.context() as m:
        m.setattr(journaldb, "start_incremental", lambda conn: None)
        with Journal(path) as j:
            fill_journal(j, WEB, mib)
            fill_journal(j, DB, 1)
    assert not _mode(path).incremental


def test_an_older_journal_is_rewritten_once_and_then_gives_pages_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "j.db"
    _older_journal(path, monkeypatch, 20)
    caplog.set_level(logging.INFO, "owner.journalvacuum")
    with Journal(path) as j:
        last = j.last_id()
        j.set_retention({("s", "web"): MIB})
        _settled(j)
        assert _mode(path).incremental
        assert on_disk(path) < 4 * MIB, on_disk(path)
        assert MIB // 2 <= journal_kept(j, "web") <= MIB and journal_kept(j, "db") == MIB
        assert j.last_id() == last
        assert "rewritten to give" in caplog.text


def test_an_older_journal_too_large_to_rewrite_keeps_its_pages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "j.db"
    _older_journal(path, monkeypatch, 20)
    monkeypatch.setattr(journalvacuum, "CONVERT_MAX_PAGES", 100)
    caplog.set_level(logging.INFO, "owner.journalvacuum")
    size = path.stat().st_size
    with Journal(path) as j:
        j.set_retention({("s", "web"): MIB})
        _settled(j)
        j.set_retention({("s", "web"): 2 * MIB})
        _settled(j)
        assert not _mode(path).incremental and path.stat().st_size >= size
        assert caplog.text.count("too large") == 1   # told once, not at every prune
        assert journal_kept(j, "db") == MIB


def _mapped_db(path: Path, free_mib: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    journalvacuum.start_incremental(conn)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x BLOB)")
    conn.executemany("INSERT INTO t VALUES (?)", [(b"y" * 4000,)] * (free_mib * 256 + 64))
    conn.execute("DELETE FROM t WHERE rowid > 64")
    return conn


def test_a_step_stops_when_lines_are_queued_and_the_next_idle_goes_on(tmp_path: Path):
    conn = _mapped_db(tmp_path / "t.db", 12)
    lock, frames = threading.Lock(), []
    try:
        gb = GiveBack()
        free = pages(conn).free
        assert free > journalvacuum.SLACK_PAGES
        calls = iter([False, True])
        # one step, then lines: not finished (no truncate with lines waiting), still due
        assert not gb.run(conn, lock, lambda: next(calls, True), frames.append)
        assert gb.due and gb.released == journalvacuum.STEP_PAGES
        assert gb.run(conn, lock, lambda: False, frames.append)   # finished: cut the file
        # the file lost its free pages and the pointer-map pages that mapped them
        assert not gb.due and pages(conn).free == 0 and gb.released >= free
        assert sum(frames) == gb.released
        assert not gb.run(conn, lock, lambda: False, frames.append)   # nothing due
    finally:
        conn.close()


def test_free_pages_under_the_slack_stay(tmp_path: Path) -> None:
    conn = _mapped_db(tmp_path / "t.db", 4)
    try:
        gb = GiveBack()
        free = pages(conn).free
        assert not gb.run(conn, threading.Lock(), lambda: False, lambda n: None)
        assert not gb.due and pages(conn).free == free and gb.released == 0
        gb.freed()
        assert gb.due
    finally:
        conn.close()


def test_a_failing_step_is_logged_and_tried_again_after_a_quiet_time(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conn = _mapped_db(tmp_path / "t.db", 12)
    reader = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    try:
        reader.execute("BEGIN IMMEDIATE")   # holds the write lock: the step cannot start
        conn.execute("PRAGMA busy_timeout=0")
        now = [100.0]
        gb = GiveBack(clock=lambda: now[0])
        assert not gb.run(conn, threading.Lock(), lambda: False, lambda n: None)
        assert "giving free pages back failed" in caplog.text
        assert gb.due and not gb.pending() and gb.quiet_for() == journalvacuum.QUIET_S
        reader.execute("ROLLBACK")
        gb.freed()   # a prune soon after: not tried again yet (a full disk fails each)
        assert not gb.run(conn, threading.Lock(), lambda: False, lambda n: None)
        assert caplog.text.count("failed") == 1
        now[0] += journalvacuum.QUIET_S   # then it is, with no prune needed
        assert gb.pending() and gb.quiet_for() is None
        assert gb.run(conn, threading.Lock(), lambda: False, lambda n: None)
        assert pages(conn).free == 0 and not gb.due
    finally:
        reader.close()
        conn.close()


def test_an_unexpected_error_while_giving_back_leaves_the_writer_writing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    real, calls = journalvacuum.pages, []

    def broken(conn: sqlite3.Connection) -> Pages:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected")
        return real(conn)
    monkeypatch.setattr(journalvacuum, "pages", broken)
    monkeypatch.setattr(journalvacuum, "QUIET_S", 0.3)
    path = tmp_path / "j.db"
    with Journal(path) as j:
        fill_journal(j, WEB, 16)
        j.set_retention({("s", "web"): MIB})
        deadline = time.monotonic() + 20
        while "injected" not in caplog.text:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert "Traceback" in caplog.text
        fill_journal(j, DB, 1)   # the writer thread lives on
        assert journal_kept(j, "db") == MIB
        # and after the quiet time it tries again by itself: no prune needed
        while j._give_back.due or j._ckpt.owed():
            assert time.monotonic() < deadline, "not tried again"
            time.sleep(0.01)
        assert on_disk(path) < 4 * MIB, on_disk(path)


def test_pages_freed_while_a_give_back_runs_stay_due(tmp_path: Path) -> None:
    """Was: a run cleared `due` when it ended, so a forget or a smaller budget that
    freed pages meanwhile (between two steps, outside the writer's lock) was lost until
    some later prune."""
    conn = _mapped_db(tmp_path / "t.db", 12)
    try:
        gb = GiveBack()
        once = iter([True])

        def busy() -> bool:
            if next(once, False):
                gb.freed()   # another thread frees pages between two steps
            return False
        assert gb.run(conn, threading.Lock(), busy, lambda n: None)
        assert gb.due and gb.pending()   # looked at again at the next idle
        assert not gb.run(conn, threading.Lock(), lambda: False, lambda n: None)
        assert not gb.due
    finally:
        conn.close()
