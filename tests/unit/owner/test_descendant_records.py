"""Tracked descendants in owner.db: an older owner.db reads as having none, rows round-trip,
and the launcher writes only when the tracked set changed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from owner.store import FORMAT, SCHEMA, OwnerStore, Tracked
from owner.supervise import Launcher
from protocol.durable import open_sqlite


def test_an_older_owner_db_gains_the_tables_and_reads_as_empty(tmp_path: Path) -> None:
    db = tmp_path / "owner.db"
    open_sqlite(db, "tenure-owner", FORMAT, SCHEMA, wal=True).close()  # before them
    store = OwnerStore(str(db))
    try:
        assert store.descendants("boot") == []
        assert store.cgroups(["k"]) == {} and store.ended_cgroups("boot") == {}
    finally:
        store.close()


def test_descendants_round_trip_per_boot_and_are_forgotten(tmp_path: Path) -> None:
    store = OwnerStore(str(tmp_path / "owner.db"))
    try:
        store.record_descendants([Tracked(10, 100, "k1", "b1"), Tracked(11, 101, "k1", "b1"),
                                  Tracked(12, 102, "k2", "b0")], [])
        store.record_descendants([], [(11, 101)])
        assert store.descendants("b1") == [Tracked(10, 100, "k1", "b1")]
        assert store.descendants("b0") == [Tracked(12, 102, "k2", "b0")]
        store.clear_descendants()
        assert store.descendants("b1") == store.descendants("b0") == []
    finally:
        store.close()


class _Store:
    def __init__(self) -> None:
        self.writes: list[tuple[list[Tracked], list[tuple[int, int]]]] = []

    def record_descendants(self, added: list[Tracked], gone: list[tuple[int, int]]) -> None:
        self.writes.append((added, gone))


def test_the_launcher_writes_only_changes() -> None:
    tracked: dict[tuple[int, int], str] = {(10, 100): "k1"}
    store = _Store()
    launcher: Any = SimpleNamespace(procs=SimpleNamespace(descendants=lambda: dict(tracked)),
                                    store=store, boot_id="b", _recorded={})
    Launcher.record_descendants(launcher)
    Launcher.record_descendants(launcher)          # nothing changed: no write
    assert store.writes == [([Tracked(10, 100, "k1", "b")], [])]
    tracked[(11, 101)] = "k1"
    del tracked[(10, 100)]
    Launcher.record_descendants(launcher)
    assert store.writes[1] == ([Tracked(11, 101, "k1", "b")], [(10, 100)])
    Launcher.record_descendants(launcher)
    assert len(store.writes) == 2
