"""The guardian keeps the newest handoff records, checkpoints and backend logs only:
newest as state.db recorded the activations, whatever the files' times say."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from guardian.coordinator import Coordinator
from guardian.paths import GuardianPaths
from guardian.phases import Kind
from guardian.state import StateStore


class _Running:
    def __init__(self, activation: str) -> None:
        self.activation = activation


def _rig(tmp_path: Path, state: StateStore, mtimes: list[float]) -> tuple[Coordinator,
                                                                         list[str]]:
    """Activations recorded one after the other, each with a handoff record and a
    backend log of the mtime given; the first runs."""
    paths = GuardianPaths(tmp_path)
    paths.handoffs.mkdir(parents=True)
    paths.logs.mkdir(parents=True)
    (paths.logs / "owner.log").write_text("kept: not a backend log")
    ids = []
    for i, mtime in enumerate(mtimes):
        aid = state.create_activation(Kind.UPGRADE, "r", "q", i).id
        ids.append(aid)
        for f in (paths.handoffs / f"{aid}.json", paths.logs / f"backend-{aid}.log"):
            f.write_text("x")
            os.utime(f, (mtime, mtime))
    co = Coordinator.__new__(Coordinator)
    co.paths, co.state = paths, state
    co.current = _Running(ids[0])  # type: ignore[assignment]
    return co, ids


def _left(co: Coordinator) -> tuple[list[str], list[str]]:
    return (sorted(p.name for p in co.paths.handoffs.iterdir()),
            sorted(p.name for p in co.paths.logs.iterdir()))


@pytest.mark.parametrize("set_back", [False, True])
def test_prune_keeps_the_newest_and_the_running_generation(tmp_path: Path,
                                                           set_back: bool) -> None:
    """set_back: the wall clock went back a day before the last four were written. Was:
    those sorted as the oldest and were deleted first (the log of the upgrade that had
    just failed, which its error names, among them)."""
    state = StateStore(str(tmp_path / "state.db"))
    try:
        mtimes = [1000.0 + i - (86_400 if set_back and i >= 6 else 0) for i in range(10)]
        co, ids = _rig(tmp_path, state, mtimes)
        assert co.prune_files(keep=3) == 12   # 7 old ones in each place, the running kept
        kept = [ids[0], *ids[7:]]
        assert _left(co) == (sorted(f"{a}.json" for a in kept),
                             sorted([*(f"backend-{a}.log" for a in kept), "owner.log"]))
    finally:
        state.close()


def test_files_of_activations_state_db_lacks_go_by_their_times(tmp_path: Path) -> None:
    """A state.db set aside and begun again names none of the old files' activations:
    they are kept newest first by their times, after the ones it names."""
    state = StateStore(str(tmp_path / "state.db"))
    try:
        co, ids = _rig(tmp_path, state, [1000.0 + i for i in range(4)])
        for i in range(4):
            for f in (co.paths.handoffs / f"old{i}.json", co.paths.logs / f"backend-old{i}.log"):
                f.write_text("x")
                os.utime(f, (500.0 + i, 500.0 + i))
        assert co.prune_files(keep=6) == 4
        handoffs, _ = _left(co)
        assert handoffs == sorted([*(f"{a}.json" for a in ids), "old2.json", "old3.json"])
    finally:
        state.close()


def test_an_unclean_receipt_just_kept_is_not_pruned_after_a_clock_set_back(
        tmp_path: Path) -> None:
    """The archive keeps its newest receipts by mtime; the one just kept stays whatever
    its mtime (written after the clock was set back, it sorts as the oldest)."""
    from owner.receipt import keep_receipt
    archive = tmp_path / "execution" / "receipts"
    (tmp_path / "execution").mkdir(mode=0o700)
    for i in range(3):
        keep_receipt({"instance": f"i{i}"}, str(archive), keep=3)
    day_ago = time.time() - 86_400
    path = keep_receipt({"instance": "new"}, str(archive), keep=4)
    os.utime(path, (day_ago, day_ago))   # as a clock a day behind writes it
    assert keep_receipt({"instance": "new"}, str(archive), keep=2) == path
    assert os.path.exists(path)
