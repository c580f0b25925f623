"""Tracked descendants in owner.db: an older owner.db reads as having none, rows round-trip,
and the launcher writes only when the tracked set changed (and rebuilds it only when the
process table's tracked_revision moved)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from owner.descendants import Descendants
from owner.store import FORMAT, SCHEMA, OwnerStore, Tracked
from owner.supervise import Launcher
from protocol.durable import open_sqlite
from protocol.procfs import read_stat


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
    """Only what changed is written, and the map is not even rebuilt (O(launches)) while
    the table's tracked_revision stands still."""
    tracked: dict[tuple[int, int], str] = {(10, 100): "k1"}
    built: list[int] = []

    def descendants() -> dict[tuple[int, int], str]:
        built.append(1)
        return dict(tracked)

    store = _Store()
    procs = SimpleNamespace(descendants=descendants, tracked_revision=1)
    launcher: Any = SimpleNamespace(procs=procs, store=store, boot_id="b", _recorded={},
                                    _recorded_revision=0)
    Launcher.record_descendants(launcher)
    Launcher.record_descendants(launcher)          # same revision: nothing rebuilt
    assert store.writes == [([Tracked(10, 100, "k1", "b")], [])] and len(built) == 1
    procs.tracked_revision = 2                     # moved, but the map is the same
    Launcher.record_descendants(launcher)
    assert len(store.writes) == 1 and len(built) == 2
    tracked[(11, 101)] = "k1"
    del tracked[(10, 100)]
    Launcher.record_descendants(launcher)          # a change the revision did not show
    assert len(store.writes) == 1 and len(built) == 2
    procs.tracked_revision = 3
    Launcher.record_descendants(launcher)
    assert store.writes[1] == ([Tracked(11, 101, "k1", "b")], [(10, 100)])
    Launcher.record_descendants(launcher)
    assert len(store.writes) == 2 and len(built) == 3


def test_a_failed_write_is_retried_at_the_next_call() -> None:
    class Failing(_Store):
        def record_descendants(self, added: list[Tracked], gone: list[tuple[int, int]]
                               ) -> None:
            raise OSError("disk full")

    good = _Store()
    procs = SimpleNamespace(descendants=lambda: {(10, 100): "k1"}, tracked_revision=1)
    launcher: Any = SimpleNamespace(procs=procs, store=Failing(), boot_id="b",
                                    _recorded={}, _recorded_revision=0)
    try:
        Launcher.record_descendants(launcher)
    except OSError:
        pass
    else:
        raise AssertionError("the write's failure was not raised")
    launcher.store = good
    Launcher.record_descendants(launcher)          # same revision, still unwritten
    assert good.writes == [([Tracked(10, 100, "k1", "b")], [])]


def test_the_tracked_revision_moves_with_every_change_and_only_then() -> None:
    """A tree reports each change of what it tracks (adopt, a refresh that forgets)."""
    leader = subprocess.Popen(["sleep", "30"])
    other = subprocess.Popen(["sleep", "30"])
    try:
        changes: list[int] = []
        tree = Descendants(leader.pid, lambda: changes.append(1))
        tree.adopt(leader.pid, 5)                  # the leader itself: not tracked
        assert changes == [] and tree.known == {}
        st = read_stat(other.pid)
        assert st is not None
        tree.adopt(other.pid, st.start_ticks)
        tree.adopt(other.pid, st.start_ticks)      # the same again: no change
        assert len(changes) == 1
        tree.adopt(999_999_999, 1)                 # no such process
        tree.refresh(leader_unreaped=True)         # forgets it: a change
        assert tree.known == {other.pid: st.start_ticks} and len(changes) == 3
        tree.refresh(leader_unreaped=True)         # nothing new, nothing gone
        assert len(changes) == 3
        other.kill()
        other.wait()
        tree.refresh(leader_unreaped=True)
        assert tree.known == {} and len(changes) == 4
    finally:
        for proc in (leader, other):
            proc.kill()
            proc.wait()
