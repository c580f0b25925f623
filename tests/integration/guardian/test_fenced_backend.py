"""Regression: a backend generation fenced off while it served (it was stopped while
its guardian died, and the next `tenure up` fenced the owner for a new generation) went
on serving once continued: it took commands, and saved the state changes the owner
refused into backend.db, where the next generation found an instance ``stopping``
forever. Its API socket also kept the next generation from starting. Now it learns of
the fence from its next owner call or heartbeat, stands down and exits, saving nothing.

Real daemons; SIGSTOP/SIGCONT of the backend, SIGKILL of the guardian."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from backend.store import BackendStore
from backend.testing import in_thread

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import owner_epoch, wait_gone

CONFIG = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\nrestart = "always"\n'


def test_a_backend_fenced_while_stopped_stands_down_and_exits(cluster):
    cluster.up(CONFIG)
    before = cluster.wait_ready(1)["s/a/0"]
    cluster.wait(lambda: cluster.cli("backend", "status").out["recovery"]["state"] == "ready",
                 30, "a valid recovery certificate")
    guardian = int(cluster.cli("backend", "status", check=True).out["guardian"]["pid"])
    old, epoch = cluster.backend_pid(), owner_epoch(cluster)
    activation = cluster.status()["backend"]["activation"]
    os.kill(old, signal.SIGSTOP)
    try:
        os.kill(guardian, signal.SIGKILL)
        wait_gone(guardian)
        up = in_thread(lambda: cluster.up())
        cluster.wait(lambda: owner_epoch(cluster) > epoch, 60, "a new guardian's fence")
    finally:
        os.kill(old, signal.SIGCONT)
    wait_gone(old)
    up[0].join(200)
    assert "err" not in up[1], up[1]
    # learnt from its epoch read or from the first call the owner refused (an ack of
    # observations can come first once it is continued): either way it stands down
    said = cluster.backend_log(activation)
    assert "standing down for good: the owner holds epoch" in said or \
        "standing down for good: the owner refused" in said, said
    apps = cluster.wait_ready(1)
    assert cluster.backend_pid() != old
    assert apps["s/a/0"]["pid"] == before["pid"]   # the app never noticed
    store = BackendStore(str(cluster.layout.backend_db))
    try:
        assert store.instances()["s/a/0"]["state"] == "ready"
    finally:
        store.close()

