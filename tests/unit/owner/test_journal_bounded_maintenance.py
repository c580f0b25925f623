"""Lowering a log budget, forgetting an app or forgetting sources deletes what it no longer keeps in
transactions of at most about a batch's size, so journal.db-wal stays under its cap
(docs/state.md) however much goes, and the writer's batches go in between two: one
transaction of the whole excess made a WAL as large as what it deleted (GiBs on a large
budget, refused by the nearly full disk that prompted the change) and held capture up
for as long as it ran."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from owner import journalckpt, journaltables
from owner.journal import Journal, LogSource
from protocol.errors import StorageFailed

MIB = 1 << 20
FRAME = 4096 + 24
A = LogSource("s", "a", 0, 1)
A1 = LogSource("s", "a", 1, 1)   # another instance of app a
B = LogSource("s", "b", 0, 1)


def _small_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journalckpt, "CKPT_FRAMES", 50)
    monkeypatch.setattr(journalckpt, "RESTART_FRAMES", 100)
    monkeypatch.setattr(journalckpt, "CHASE_FRAMES", 200)
    monkeypatch.setattr(journalckpt, "CAP_FRAMES", 1024)   # 4 MiB
    monkeypatch.setattr(journaltables, "STEP_BYTES", 1 * MIB)   # 8 MiB: 64 MiB's share


def _fill(j: Journal, source: LogSource, mib: int) -> None:
    line = b"y" * 1023
    for _ in range(mib):
        assert j.append_split(source, "stdout", [line] * 1024) == 1024
        assert j.flush(timeout=60)


def _wal(path: Path) -> int:
    wal = path.parent / (path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def _quiet(j: Journal, path: Path) -> None:
    """Wait for the idle writer to cut the WAL back, so the size seen next is new."""
    deadline = time.monotonic() + 30
    while _wal(path) > journalckpt.KEEP_BYTES and time.monotonic() < deadline:
        time.sleep(0.02)


def _kept(j: Journal, app: str) -> int:
    return sum(len(r.data) for r in j.read(0, 100_000, app=app))


@pytest.fixture
def filled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Journal, Path]]:
    """A journal whose app ``a`` holds 24 MiB under a large budget, its WAL cut back,
    with the small cap and steps of :func:`_small_cap`."""
    _small_cap(monkeypatch)
    path = tmp_path / "journal.db"
    with Journal(path, retention_bytes_per_app=1 << 30) as j:
        _fill(j, A, 24)
        _quiet(j, path)
        yield j, path


def _within_cap(path: Path) -> bool:
    return _wal(path) < 2 * journalckpt.CAP_FRAMES * FRAME


def test_lowering_a_budget_prunes_in_bounded_transactions(
        filled: tuple[Journal, Path]) -> None:
    j, path = filled
    j.set_retention({("s", "a"): 1 * MIB})
    assert _kept(j, "a") <= 1 * MIB
    assert _within_cap(path), _wal(path)
    assert j.retention()[1] == {("s", "a"): 1 * MIB}


def test_forgetting_a_large_app_deletes_in_bounded_transactions(
        filled: tuple[Journal, Path]) -> None:
    j, path = filled
    _fill(j, B, 1)
    assert j.forget_apps([("s", "a")]) == 24 * 1024
    assert _kept(j, "a") == 0 and _kept(j, "b") == 1024 * 1023
    assert _within_cap(path), _wal(path)
    assert [a[:2] for a in j.apps()] == [("s", "b")]


def test_lines_written_while_a_budget_is_lowered_are_kept(
        filled: tuple[Journal, Path]) -> None:
    """The writer's batches go in between two of the prune's transactions: the app
    writing meanwhile keeps its newest lines within the new budget, and none is lost."""
    j, _ = filled
    done = threading.Event()

    def lower() -> None:
        j.set_retention({("s", "a"): 2 * MIB})
        done.set()
    t = threading.Thread(target=lower)
    t.start()
    n = 0
    while not done.is_set() and n < 4000:
        assert j.append(B, "stdout", [(b"%08d" % n, 0)]) == 1
        n += 1
    t.join(60)
    assert j.flush(timeout=60)
    assert [r.data for r in j.read(0, 100_000, app="b")] == [b"%08d" % i
                                                             for i in range(n)]
    assert _kept(j, "a") <= 2 * MIB and j.overflow_total == 0


def _transactions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each maintenance transaction from now on was for."""
    seen: list[str] = []
    maintain = journaltables.Tables.maintain

    def counted(self: journaltables.Tables, what: str, work: object) -> object:
        seen.append(what)
        return maintain(self, what, work)   # type: ignore[arg-type]
    monkeypatch.setattr(journaltables.Tables, "maintain", counted)
    return seen


def test_forgetting_a_large_source_deletes_in_bounded_transactions(
        filled: tuple[Journal, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: logs.forget deleted all of its sources in one transaction, a WAL as large as
    a job's output (its app's budget: GiBs) and the writer held for as long."""
    j, path = filled
    _fill(j, A1, 1)
    _fill(j, B, 1)
    steps = _transactions(monkeypatch)
    assert j.forget([("s", "a", 0)]) == 24 * 1024
    assert _within_cap(path), _wal(path)
    assert len(steps) > 1
    assert _kept(j, "a") == 1024 * 1023 and _kept(j, "b") == 1024 * 1023
    assert {r.instance for r in j.read(0, 100_000, app="a")} == {1}
    assert j.forget([("s", "a", 0)]) == 0


def test_a_forget_that_fails_part_way_keeps_what_it_deleted_and_names_the_source(
        filled: tuple[Journal, Path]) -> None:
    j, path = filled
    _fill(j, B, 1)
    (top,) = [r.id for r in j.read_page(0, 1, tail=1, app="a").records]
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TRIGGER boom BEFORE DELETE ON records WHEN OLD.id > {top - 1024}"
                 " BEGIN SELECT RAISE(ABORT, 'injected'); END")
    conn.commit()
    with pytest.raises(StorageFailed, match="s/a/0"):
        j.forget([("s", "a", 0)])
    left = len(j.read(0, 100_000, app="a"))
    assert 1024 <= left < 23 * 1024   # the earlier steps' deletes stay
    conn.execute("DROP TRIGGER boom")
    conn.commit()
    conn.close()
    assert j.forget([("s", "a", 0)]) == left   # a retry goes on
    assert _kept(j, "a") == 0 and _kept(j, "b") == 1024 * 1023
