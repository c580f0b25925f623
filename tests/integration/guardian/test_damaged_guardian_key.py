"""guardian.key damaged: the guardian refuses it, naming the way out, and the way out
works: `tenure down` stops the apps with their stop policies, the key and the owner's
pin of its public half are removed, and `tenure up` starts everything under a new key."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import config, stop_cluster_guardian


def test_a_damaged_guardian_key_is_replaced_after_a_down(cluster):
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    apps = {pid for pid, _ in cluster.pids().values()}
    stop_cluster_guardian(cluster, signal.SIGTERM)
    key = cluster.layout.home / "runtime" / "guardian.key"
    pin = cluster.layout.execution / "guardian.pub"
    key.write_bytes(b"garbage\n")

    refused = cluster.cli("up")
    said = refused.stderr + str(refused.out)
    assert refused.code != 0 and "STATE_CORRUPT" in said and str(key) in said, said
    assert 'docs/state.md, "runtime/guardian.key"' in said, said
    assert key.read_bytes() == b"garbage\n" and all(psutil.pid_exists(p) for p in apps)

    assert cluster.down().code == 0                 # the apps stop with their policies
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() !=
                   psutil.STATUS_ZOMBIE for p in apps)
    old_pin = pin.read_text()
    key.unlink()
    pin.unlink()
    cluster.up()
    cluster.wait_ready(2)
    assert pin.read_text() != old_pin                 # pinned anew, to the new key
