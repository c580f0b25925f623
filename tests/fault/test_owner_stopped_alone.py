"""The owner stopped alone (SIGTERM, as `systemctl stop` or a restart of its unit sends)
while the guardian and a backend run on, with real daemons.

The owner stops every application on its way out. The backend once took those stops
for crashes (exits counted `signal`, not `requested`) and launched each instance again
against an owner that was going, then gone: every launch was five unanswered requests,
each counted as a failed start, until the start limit gave up (`failed`). `tenure up`
then started a new owner, applied to the generation attached to the owner that had
stopped and failed with OWNER_CHANGED; run again, it said "no-change" with every
application still `failed`.
"""

from __future__ import annotations

import os
import signal
import time

from backend.testing import Cluster
from protocol.procfs import running, start_ticks

# a start limit the old behaviour exhausts within seconds
CONFIG = """
[stacks.s.apps.a]
command = ["sleep", "100000"]
restart = "always"
instances = 2
start_limit = { burst = 2, interval = 120 }
"""


def _term_owner(cluster: Cluster) -> None:
    """SIGTERM the owner and wait until it is gone (it stops the apps first)."""
    pid = cluster.cli("backend", "status", check=True).out["owner"]["pid"]
    ticks = start_ticks(pid)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while ticks is not None and running(pid, ticks) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(pid, ticks), "the owner did not stop"


def _exits(cluster: Cluster) -> list[dict]:
    return list(cluster.call("events.read", {"kinds": ["exit"]})["events"])


def test_apps_the_owner_stopped_run_again_with_the_next_owner(cluster):
    cluster.up(CONFIG)
    before = cluster.wait_ready(2)
    old_pids = {k: a["pid"] for k, a in before.items()}
    _term_owner(cluster)
    # the backend that watched took the owner's stops as stops, not crashes
    cluster.wait(lambda: len(_exits(cluster)) >= 2, what="both exits recorded")
    exits = _exits(cluster)
    assert {e["data"]["pid"] for e in exits} == set(old_pids.values()), exits
    assert all(e["data"]["requested"] for e in exits), exits
    # and it waits for an owner instead of spending starts on none: never failed
    cluster.wait(lambda: cluster.backend_log().count("the launch waits for it") >= 2,
                 what="both launches waiting for an owner")
    apps = cluster.apps()
    assert {a["state"] for a in apps.values()} == {"starting"}, apps
    assert all(a["restarts"] == 0 for a in apps.values()), apps

    up = cluster.up(CONFIG)   # starts a new owner; exits 0, or check=True fails here
    assert up.out["apply"]["operation"]["outcome"] in ("success", "no-change"), up.out
    assert up.out["status"]["owner_link"]["current"], up.out["status"]
    after = cluster.wait_ready(2)
    assert all(a["pid"] not in old_pids.values() for a in after.values()), after
    # one relaunch each, by the generation of the new owner
    assert all(a["restarts"] == 1 for a in after.values()), after
