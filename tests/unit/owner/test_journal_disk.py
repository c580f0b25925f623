"""The journal's disk use under a flood stays near its promise (docs/state.md, config.md):
journal.db about the sum of the apps' budgets, and journal.db-wal under its cap while it
runs and back to its kept size once it starts over.

The flood is an app with four instances each writing 1 MiB at a time of 4 KiB lines, as
fast as the writer takes them, against a budget of 2 MiB: 32 times the budget in all."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from owner.journal import Journal, LogSource

MIB = 1 << 20
BUDGET = 2 * MIB
SOURCES = [LogSource("s", "app", i, 1) for i in range(4)]
LINE = b"x" * 4095
APPEND = [LINE] * 256   # one 1 MiB write of 4 KiB lines
DB_SLACK = 2 * MIB
"""What journal.db may take beyond the budget (docs/state.md): the newest append taken
before pruning, extents of a larger size, the freelist between two batches."""
WAL_CAP = 64 * MIB
"""journal.db-wal never grows past it (docs/state.md)."""
WAL_KEPT = 4 * MIB
"""What is left of journal.db-wal once it starts over (docs/state.md)."""


def _wal(path: Path) -> int:
    wal = path.parent / (path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def _flood(j: Journal, path: Path, mib: int, per_flush: int = 16) -> int:
    """Append ``mib`` MiB (``per_flush`` MiB between flushes, so batches are as large
    as the writer takes them); returns the largest WAL seen after a flush."""
    peak = 0
    for n in range(mib):
        assert j.append_split(SOURCES[n % 4], "stdout", list(APPEND)) == len(APPEND)
        if n % per_flush == per_flush - 1:
            assert j.flush(timeout=60)
            peak = max(peak, _wal(path))
    assert j.flush(timeout=60)
    return max(peak, _wal(path))


def _cut_back(path: Path, within: float = 60.0) -> bool:
    """Whether the WAL is WAL_KEPT or shorter within ``within`` s (a busy machine
    delays the writer's idle truncate; nothing here measures how soon)."""
    deadline = time.monotonic() + within
    while _wal(path) > WAL_KEPT:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _pages(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    try:
        return (conn.execute("PRAGMA page_count").fetchone()[0],
                conn.execute("PRAGMA freelist_count").fetchone()[0])
    finally:
        conn.close()


def test_a_flood_keeps_the_database_near_the_budget(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal(path) as j:
        j.set_retention({("s", "app"): BUDGET})
        _flood(j, path, 16 * BUDGET // MIB)
        kept = sum(len(r.data) for r in j.read(0, 10_000, app="app"))
        assert BUDGET // 2 <= kept <= BUDGET
        assert j.overflow_total == 0
    size = path.stat().st_size
    pages, free = _pages(path)
    assert size <= BUDGET + DB_SLACK, (size, pages, free)


def test_the_wal_stays_under_its_cap_and_is_cut_back_when_it_starts_over(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal(path, retention_bytes_per_app=64 * MIB) as j:
        peak = _flood(j, path, 160)   # 2.5 times the WAL's cap, into one 64 MiB budget
        assert peak <= WAL_CAP, peak
        # The flood is over: the writer, with nothing queued, empties the WAL.
        assert _cut_back(path), _wal(path)
        # And a WAL that starts over while lines keep coming is cut back to WAL_KEPT.
        _flood(j, path, 64)
        assert j.append_split(SOURCES[0], "stdout", [b"quiet"]) == 1
        assert j.flush(timeout=30)
        assert j._ckpt.wait_idle(timeout=30)
        assert _cut_back(path), _wal(path)
        assert j.checkpoint_failures == 0


def test_an_idle_truncate_a_reader_was_in_the_way_of_is_tried_again(tmp_path: Path) -> None:
    """The writer truncated a long WAL once, when it went idle; a reader in the way then
    left it long until the next line came (seen: 29 MB for good on a busy machine)."""
    path = tmp_path / "journal.db"
    with Journal(path, retention_bytes_per_app=64 * MIB) as j:
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()   # holds a snapshot
            _flood(j, path, 24)
            assert j._ckpt.wait_idle(timeout=30)
            time.sleep(0.5)              # the writer went idle and tried: the reader was there
            assert _wal(path) > WAL_KEPT, _wal(path)
        finally:
            reader.execute("COMMIT")
            reader.close()
        assert _cut_back(path, within=10), _wal(path)   # tried again, nothing written since
