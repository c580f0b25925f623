"""The guardian keeps the newest handoff records, checkpoints and backend logs only."""

from __future__ import annotations

import os
from pathlib import Path

from guardian.coordinator import Coordinator
from guardian.paths import GuardianPaths


class _Running:
    activation = "a00"


def test_prune_keeps_the_newest_and_the_running_generation(tmp_path: Path) -> None:
    paths = GuardianPaths(tmp_path)
    paths.handoffs.mkdir(parents=True)
    paths.logs.mkdir(parents=True)
    (paths.logs / "owner.log").write_text("kept: not a backend log")
    for i in range(10):
        for f in (paths.handoffs / f"a{i:02d}.json", paths.logs / f"backend-a{i:02d}.log"):
            f.write_text("x")
            os.utime(f, (1000 + i, 1000 + i))
    co = Coordinator.__new__(Coordinator)
    co.paths, co.current = paths, _Running()  # type: ignore[assignment]
    assert co.prune_files(keep=3) == 12  # 7 old ones in each place, the running a00 kept
    assert sorted(p.name for p in paths.handoffs.iterdir()) == [
        "a00.json", "a07.json", "a08.json", "a09.json"]
    assert sorted(p.name for p in paths.logs.iterdir()) == [
        "backend-a00.log", "backend-a07.log", "backend-a08.log", "backend-a09.log",
        "owner.log"]
