"""Regression: a backend upgrade with state the candidate would refuse (backend/backend.db
open to others, a backend/ of mode 0750, a home of mode 0777) passed `--check`
("complete (check-only)"), then drained, fenced and retired the healthy incumbent; the
candidate and the restore of the previous release both failed with UNSAFE_PATH and the
activation ended `uncertain` with no backend and recovery blocked. docs/upgrade.md:
UNSAFE_PATH is a code of phase `checked`, which aborts with nothing touched. Real
daemons."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_handoff_support as support
from test_handoff_support import PHASES, backend_procs, config, install, owner_epoch

candidates = support.candidates  # the session fixture of derived releases


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _unsafe(cluster: Any, what: str) -> tuple[Path, int, int, str]:
    """(path, the unsafe mode, its own mode, what the refusal says)."""
    if what == "backend.db":
        db = cluster.layout.backend / "backend.db"
        return db, 0o644, 0o600, (f"{db} is open to other users (mode 0644); find out who "
                                  "changed it, then chmod 600 it")
    backend = cluster.layout.backend   # readable by its group: the CLI still reaches
    # its socket, a generation would refuse it
    return backend, 0o750, 0o700, (f"{backend} has mode 0750; it must be 0700: find out "
                                   "who changed it, then chmod 700 it")


def _seen(cluster: Any) -> tuple[Any, ...]:
    sel = cluster.cli("backend", "status", check=True).out["selector"]
    return (cluster.pids(), owner_epoch(cluster), sel["current"], cluster.backend_pid())


@pytest.mark.parametrize("what", ["backend.db", "backend"])
def test_unsafe_backend_state_aborts_the_upgrade_in_checked(cluster, candidates, what):
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    new = install(cluster, candidates.good)
    before = _seen(cluster)
    path, unsafe, own, said = _unsafe(cluster, what)
    assert _mode(path) == own
    os.chmod(path, unsafe)
    try:
        for check in (["--check"], []):
            res = cluster.cli("backend", "upgrade", new, *check)
            act = res.out["activation"]
            assert res.code == 1, res
            assert (act["phase"], act["outcome"], act["code"]) == (
                "aborted", "aborted", "UNSAFE_PATH"), act
            assert [r["phase"] for r in res.out["receipts"]] == ["created", "aborted"], res
            assert act["error"] == said + (
                ". A backend generation would refuse to start on it, so the handoff did "
                "not begin and nothing was changed; retry once it is put right"), act
            assert act["epoch"] is None and act["from_epoch"] is None, act
            assert f"handoff {act['id']} failed in phase checked: UNSAFE_PATH" in \
                cluster.log("guardian")
            assert _mode(path) == unsafe            # refused, never repaired
            # the incumbent serves on: same pid, same epoch, same apps, no second backend
            assert cluster.cli("status").code == 0
            assert cluster.status()["backend"]["draining"] is False
            assert _seen(cluster) == before
            assert len(backend_procs(cluster.home)) == 1
        assert cluster.cli("backend", "status", check=True).out["blocked"] is None
    finally:
        os.chmod(path, own)
    res = cluster.cli("backend", "upgrade", new)
    act = res.out["activation"]
    assert res.code == 0 and (act["phase"], act["outcome"]) == ("complete", "success"), res
    assert [r["phase"] for r in res.out["receipts"]] == PHASES
    assert cluster.pids() == before[0]
    assert cluster.backend_pid() != before[3]


def test_a_home_open_to_others_is_refused_before_the_upgrade_is_asked(cluster, candidates):
    """The home itself: every command refuses it before it asks a daemon (the
    guardian's own check in `checked` is tests/unit/guardian/test_handoff_checks.py's)."""
    cluster.up(config(sleepers=1))
    cluster.wait_ready(1)
    new = install(cluster, candidates.good)
    before = _seen(cluster)
    os.chmod(cluster.home, 0o777)
    try:
        res = cluster.cli("backend", "upgrade", new)
    finally:
        os.chmod(cluster.home, 0o700)
    assert res.code == 1 and res.out["error"]["code"] == "UNSAFE_PATH", res
    assert res.out["error"]["msg"].startswith(f"{cluster.home} has mode 0777: others may "
                                              "write to it"), res
    assert _seen(cluster) == before
    assert "handoff" not in cluster.log("guardian").split("listening")[-1]
