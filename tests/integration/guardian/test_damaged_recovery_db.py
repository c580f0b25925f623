"""recovery.db that is not a database while the apps run: recovery blocks, saying to
move it aside; the forced-recovery dry run reviews what runs (was: STATE_CORRUPT from
both, with no way out); once it is moved aside, the reviewed forced recovery adopts
every app as it runs and the backend writes a new recovery.db."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import backend_procs, config, stop_cluster_guardian

WAY_OUT = "move recovery.db aside"


def test_a_damaged_recovery_db_is_set_aside_and_a_forced_recovery_adopts(cluster):
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    apps = cluster.pids()
    stop_cluster_guardian(cluster, signal.SIGTERM)   # certifies, retires; apps stay
    db = cluster.layout.home / "backend" / "recovery.db"
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    db.write_bytes(b"\x5a" * 8192)

    blocked = cluster.cli("up")
    said = blocked.stderr + str(blocked.out)
    assert blocked.code != 0 and "RECOVERY_BLOCKED" in said and WAY_OUT in said, said
    assert "once that is fixed" not in said, said   # recover alone would block again
    assert cluster.pids() == apps and backend_procs(cluster.home) == []
    reviewed = cluster.cli("backend", "recover", "--dry-run", check=True).out
    assert WAY_OUT in reviewed["reason"] and len(reviewed["adopt"]) == 2

    db.rename(db.with_name("recovery.db.damaged"))
    plan = cluster.cli("backend", "recover", "--dry-run", check=True).out
    done = cluster.cli("backend", "recover", "--digest", plan["digest"])
    assert done.code == 0, (done.out, done.stderr)
    cluster.wait_ready(2)
    assert cluster.pids() == apps                      # adopted, none restarted
    assert db.exists()                                 # written again
