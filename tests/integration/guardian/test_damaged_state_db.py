"""The guardian's state.db damaged while the apps run: the guardian refuses to start,
naming the way out, and set aside, a new guardian starts a new one. After an orderly
stop of the guardian no backend runs: recovery blocks (the certificate names a grant
it never issued), and the reviewed forced recovery adopts every app as it runs. After a
kill the backend runs on: the new guardian adopts it and selects the release it runs."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import backend_procs, config, stop_cluster_guardian


def _damaged_and_set_aside(cluster, sig: int) -> dict:
    cluster.up(config(sleepers=3))
    cluster.wait_ready(3)
    apps = cluster.pids()
    stop_cluster_guardian(cluster, sig)
    db = cluster.layout.home / "runtime" / "state.db"
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    db.write_bytes(b"\x5a" * 8192)

    refused = cluster.cli("up")
    said = refused.stderr + str(refused.out)
    assert refused.code != 0 and "STATE_CORRUPT" in said and str(db) in said, said
    assert 'docs/recover.md, "A damaged state.db"' in said, said
    assert db.read_bytes() == b"\x5a" * 8192 and cluster.pids() == apps
    db.rename(db.with_name("state.db.damaged"))
    return apps


def test_after_an_orderly_stop_a_forced_recovery_adopts_what_runs(cluster):
    apps = _damaged_and_set_aside(cluster, signal.SIGTERM)
    blocked = cluster.cli("up")
    said = blocked.stderr + str(blocked.out)
    assert blocked.code != 0 and "a grant this guardian never issued" in said, said
    assert "--dry-run" in said and cluster.pids() == apps

    plan = cluster.cli("backend", "recover", "--dry-run", check=True).out
    assert plan["covered"] is False and len(plan["adopt"]) == 3
    done = cluster.cli("backend", "recover", "--digest", plan["digest"])
    assert done.code == 0, (done.out, done.stderr)
    cluster.wait_ready(3)
    assert cluster.pids() == apps and len(backend_procs(cluster.home)) == 1


def test_after_a_kill_the_backend_that_ran_on_is_adopted_with_its_release(cluster):
    apps = _damaged_and_set_aside(cluster, signal.SIGKILL)
    [survivor] = backend_procs(cluster.home)          # ran on without its guardian
    up = cluster.cli("up")
    assert up.code == 0, (up.out, up.stderr)
    assert backend_procs(cluster.home) == [survivor] and cluster.pids() == apps
    st = cluster.cli("backend", "status", check=True).out
    assert st["selector"]["current"] == up.out["status"]["backend"]["release"]
    # its grant is not in the new record: its certificate vouches for nothing here
    assert "a grant this guardian never issued" in st["certificate"]["refused"], st
