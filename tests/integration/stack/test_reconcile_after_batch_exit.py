"""The guided reconcile of docs/reconcile.md, as its transcript shows it: a batch app
(`restart = "never"`) that ran to its end before the owner was killed is not listed,
even when it left a `setsid` child running, since the backend stops what an exited
leader left at once. The runbook showed that child sealed as a `tracked descendant`
of a launch marked `(leader exited)`: 4 launches and 5 processes, where the command
lists 3 launches and 4 processes (once the owner's record of that child was refreshed,
within a second of its stop)."""

from __future__ import annotations

import os

import psutil

from protocol.durable import read_rows

CONFIG = """
[stacks.demo.apps.batch]
command = ["sh", "-c", "setsid sleep 100001 & sleep 1"]
restart = "never"

[stacks.demo.apps.web]
command = ["sleep", "infinity"]
instances = 2

[stacks.demo.apps.worker]
command = ["sh", "-c", "setsid sleep 100000 & exec sleep 100000"]
"""


def _of_home(cluster, argv: list[str]) -> list[int]:
    """Living processes running ``argv`` with this home in their environment."""
    home = os.path.realpath(cluster.home)
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["cmdline"] == argv and p.info["status"] != psutil.STATUS_ZOMBIE \
                    and p.environ().get("TENURE_OWNER_HOME") == home:
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def _recorded(cluster, app: str) -> int:
    """How many descendants of ``app``'s launches owner.db records (refreshed each
    second: a stopped one is forgotten at the next look)."""
    rows = read_rows(str(cluster.layout.execution / "owner.db"),
                     f"SELECT count(*) FROM descendants WHERE launch_key LIKE '{app}/%'")
    return int(rows[0][0]) if rows else 0


def test_a_batch_child_is_stopped_with_its_leader_and_not_left_for_reconcile(cluster):
    cluster.up(CONFIG)
    cluster.wait(lambda: cluster.apps()["demo/batch/0"]["state"] == "stopped", 30,
                 "the batch ran to its end")
    cluster.wait(lambda: not _of_home(cluster, ["sleep", "100001"]), 10,
                 "the batch's setsid child stopped by the backend")
    cluster.wait(lambda: _recorded(cluster, "demo/batch/0") == 0, 10,
                 "the owner's record of it forgotten")
    cluster.wait_ready(3)
    cluster.kill_owner()

    text = cluster.cli_text("owner", "reconcile", "--prepare")
    assert "3 launches of the dead owner: 3 with processes, 0 already gone" in text, text
    assert "demo/batch/0" not in text and "(leader exited)" not in text, text
    plan = cluster.cli("owner", "reconcile", "--prepare", check=True).out
    assert sorted(ln["app"] for ln in plan["launches"]) == \
        ["demo/web/0", "demo/web/1", "demo/worker/0"], plan
    sealed = [p["pid"] for ln in plan["launches"] for p in ln["processes"]]
    assert len(sealed) == 4, plan          # 3 leaders and the worker's setsid child

    done = cluster.cli("owner", "reconcile", "--drain", plan["digest"])
    assert done.code == 0, done.out
    assert done.out["stopped"] == 4 and len(done.out["proven_gone"]) == 3, done.out
    cluster.up()
    cluster.wait_ready(3, timeout=90)
    assert cluster.apps()["demo/batch/0"]["state"] == "stopped"   # restart = "never"
