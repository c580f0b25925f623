"""The sealed evidence a guided reconcile drains (owner.reconcile_plan): its digest only
proves the file whole, so the drain checks its shape before it signals anything, and
kills only a cgroup that is the launch's own, whatever the file names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from owner.paths import OwnerPaths
from owner.reconcile_plan import EVIDENCE_KIND, _digest, _kill_cgroups, drain, evidence_path
from protocol.durable import atomic_write_json
from protocol.errors import StateCorrupt

PROC = {"pid": 2**22 + 7, "start_ticks": 5, "why": "leader"}
LAUNCH = {"launch_key": "k1", "app": "s/a/0", "state": "running", "pid": 2**22 + 7,
          "pgid": 2**22 + 7, "stop": None, "cgroup": None, "processes": [PROC]}


def _seal(tmp_path: Path, **changes: Any) -> tuple[OwnerPaths, str]:
    paths = OwnerPaths(tmp_path)
    paths.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    body = {"boot_id": "b", "previous": None, "launches": [LAUNCH], "sockets": [],
            "socket_ids": {}, **changes}
    body["digest"] = _digest(body)
    atomic_write_json(evidence_path(paths), {"kind": EVIDENCE_KIND, "format": 1,
                                             "sealed_at": 1.0, **body})
    return paths, body["digest"]


@pytest.mark.parametrize("changes", [
    {"launches": {}}, {"launches": None}, {"launches": "x"}, {"launches": [1]},
    {"launches": [{**LAUNCH, "processes": None}]},
    {"launches": [{**LAUNCH, "processes": [{**PROC, "pid": "7"}]}]},
    {"launches": [{**LAUNCH, "processes": [{**PROC, "pid": 0}]}]},
    {"launches": [{**LAUNCH, "processes": [{**PROC, "start_ticks": None}]}]},
    {"launches": [{**LAUNCH, "pgid": [1]}]}, {"launches": [{**LAUNCH, "cgroup": 5}]},
    {"launches": [{k: v for k, v in LAUNCH.items() if k != "launch_key"}]},
    {"sockets": None}, {"sockets": [1]}, {"socket_ids": {"/s": "x"}},
    {"socket_ids": {"/s": [1]}}, {"socket_ids": []},
])
def test_evidence_of_another_shape_is_state_corrupt_before_any_signal(
        tmp_path: Path, changes: dict[str, Any]) -> None:
    paths, digest = _seal(tmp_path, **changes)
    with pytest.raises(StateCorrupt, match="is not evidence this owner sealed"):
        drain(paths, digest, grace=0.0, sleep=lambda s: None)


def test_only_the_launchs_own_cgroup_is_killed(tmp_path: Path) -> None:
    """A cgroup path the launch was never given (not under a cgroup mount, not named
    after it) is never written to, even when the file names it."""
    elsewhere = tmp_path / "x"
    elsewhere.mkdir()
    (elsewhere / "cgroup.procs").write_text("")
    (elsewhere / "cgroup.kill").write_text("untouched")
    for path in (str(elsewhere), "/sys/fs/cgroup/../../" + str(elsewhere)):
        assert _kill_cgroups({"launches": [{**LAUNCH, "cgroup": path}]}) == []
    assert (elsewhere / "cgroup.kill").read_text() == "untouched"
