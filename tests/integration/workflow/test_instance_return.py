"""An instance removed and added back (its app scaled down and up again, or taken out of
the config and put back) is a new instance: it starts at once, under a launch key its
predecessor never used, with no restarts and none of its predecessor's exits; also when
a new backend generation adds it back. Before, it walked through its predecessor's
spent launch keys: each answered as a launch that had ended, so the new instance showed
the old exits, counted restarts and backed off for seconds before it ran."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest


def config(instances: int) -> str:
    return (f'[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\nrestart = "always"\n'
            f"instances = {instances}\n")


def row(cluster: Any, key: str) -> dict[str, Any]:
    insts = cluster.call("inspect", {"target": key})["instances"]
    return dict(insts[0])


def kill_and_wait(cluster: Any, key: str) -> None:
    """kill -9 the instance's process; return once another one of it is ready."""
    old = cluster.apps()[key]["pid"]
    os.kill(old, signal.SIGKILL)
    cluster.wait(lambda: cluster.apps()[key]["pid"] not in (None, old)
                 and cluster.apps()[key]["ready"], 30, f"{key} running again")


def events(cluster: Any, *args: str) -> list[dict[str, Any]]:
    """`tenure --json events ARGS`: one JSON object per line (none: no output)."""
    out = cluster.cli("events", *args, check=True).out
    if out is None:
        return []
    lines = out.splitlines() if isinstance(out, str) else [json.dumps(out)]
    return [json.loads(ln) for ln in lines if ln.strip()]


@pytest.mark.parametrize("through", ["same generation", "a backend upgrade"])
def test_an_instance_scaled_away_and_back_starts_fresh(cluster, through):
    cluster.up(config(2))
    cluster.wait_ready(2)
    for _ in range(2):   # s/a/1 launched generations 1, 2 and 3
        kill_and_wait(cluster, "s/a/1")
    spent = row(cluster, "s/a/1")["launch_key"]
    assert spent == "s/a/1/3"

    cluster.up(config(1))
    assert "s/a/1" not in cluster.apps()
    if through == "a backend upgrade":   # the next generation knows it from backend.db
        release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
        up = cluster.cli("backend", "upgrade", release, timeout=300)
        assert up.ok and up.out["activation"]["phase"] == "complete", up
    mark = max((e["id"] for e in events(cluster, "-n", "1")), default=0)
    cluster.up(config(2))

    back = row(cluster, "s/a/1")
    assert back["launch_key"] == "s/a/1/4", back
    assert back["state"] == "ready" and back["restarts"] == 0
    assert back["last_exit"] is None
    kinds = [e["kind"] for e in events(cluster, "s/a/1", "--since", str(mark))]
    assert "exit" not in kinds and "restart" not in kinds, kinds
    # and its own restarts count from there
    kill_and_wait(cluster, "s/a/1")
    again = row(cluster, "s/a/1")
    assert again["launch_key"] == "s/a/1/5" and again["restarts"] == 1
