"""A damaged state.db set aside on a home that was upgraded since its first run: the
backend that outlived the killed guardian runs another release than the installed
code. The new guardian adopts it and, its record selecting nothing, selects that
release; `tenure up` waits for that rather than sealing the installed code and asking
to select it beside the running backend (it was refused: `a backend runs`)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import (
    backend_procs,
    config,
    derive_release,
    install,
    stop_cluster_guardian,
)


def test_up_after_a_damaged_state_db_keeps_the_upgraded_release(cluster, sealed_release,
                                                                 tmp_path):
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    derived = tmp_path / "derived"
    derive_release(sealed_release, derived,
                   {"backend/certify.py": lambda t: t + "\n# an upgrade that changes nothing\n"})
    rid = install(cluster, derived)
    upgraded = cluster.cli("backend", "upgrade", rid)
    assert upgraded.code == 0, (upgraded.out, upgraded.stderr)
    cluster.wait_ready(2)
    apps = cluster.pids()
    stop_cluster_guardian(cluster, signal.SIGKILL)
    [survivor] = backend_procs(cluster.home)          # runs on, on the upgraded release
    db = cluster.layout.home / "runtime" / "state.db"
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    db.write_bytes(b"\x5a" * 8192)
    refused = cluster.cli("up")
    assert refused.code != 0 and "STATE_CORRUPT" in refused.stderr + str(refused.out)
    db.rename(db.with_name("state.db.damaged"))

    up = cluster.cli("up")
    assert up.code == 0, (up.out, up.stderr)
    assert up.out["release_sealed"] is None, up.out
    assert backend_procs(cluster.home) == [survivor] and cluster.pids() == apps
    st = cluster.cli("backend", "status", check=True).out
    assert st["selector"]["current"] == rid, st["selector"]
    assert up.out["status"]["backend"]["release"] == rid

    # selecting the release it ran before, beside it, is refused, naming the way
    listed = cluster.cli("release", "list", check=True).out["releases"]
    [before] = [r["release"] for r in listed if r["release"] != rid]
    again = cluster.cli("release", "select", before)
    said = again.out["error"]
    assert again.code == 2 and said["code"] == "BAD_REQUEST", again
    assert f"`tenure backend upgrade {before}`" in said["msg"], said
    assert said["data"] == {"pid": survivor.pid, "selected": rid}, said
