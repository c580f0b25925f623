"""Regression: a backend generation fenced off while it served (it was stopped while
its guardian died, and the owner was fenced for a new generation meanwhile) went on
serving once continued: it took commands, and saved the state changes the owner refused
into backend.db, where the next generation found an instance ``stopping`` forever. Its
API socket also kept the next generation from starting. Now it learns of the fence from
its next owner call or heartbeat, stands down and exits, saving nothing.

A guardian that starts beside a backend that is alive but silent no longer fences it
(it waits for it, or blocks): the fence is made here as a guardian makes it, with the
guardian's own key. Real daemons; SIGSTOP/SIGCONT of the backend, SIGKILL of the
guardian."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path

from backend.store import BackendStore
from guardian.keys import load_or_create_key
from guardian.paths import GuardianPaths
from protocol.grant import Grant

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
        _fence(cluster, epoch + 1)   # as a new guardian's activation does
        assert owner_epoch(cluster) == epoch + 1
    finally:
        os.kill(old, signal.SIGCONT)
    wait_gone(old)
    assert cluster.up().ok
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



def _fence(cluster, epoch: int) -> None:
    """Fence the owner at ``epoch`` with a grant the guardian's key signs."""
    key = load_or_create_key(GuardianPaths(cluster.home).key)
    with cluster.owner() as c:
        instance = c.call("status")["owner"]["instance"]
        grant = Grant(epoch, str(uuid.uuid4()), "test-release", instance, time.time())
        c.call("fence", {"grant": grant.sign(key).to_wire()})
