"""A policy apply reaches an instance waiting in backoff at once, through the real path
(documented: an `update` takes effect at once).

Was: the wait begun under the old `backoff` was kept (13 s more of a 15 s wait after
`backoff` became 1 s), and after `restart = "never"` the app was still restarted once
at the old deadline."""

from __future__ import annotations

import json
import time

BASE = ('[stacks.s.apps.crash]\ncommand = ["sh", "-c", "sleep 0.3; exit 3"]\n'
        'restart = "always"\nstart_limit = { burst = 100, interval = 60 }\n')
SLOW = BASE + "backoff = { initial = 30, max = 30 }\n"


def _apply(cluster, text: str, name: str) -> None:
    path = cluster.write_config(text, name)
    plan = cluster.cli("plan", "--config", str(path), check=True).out
    assert [c["action"] for c in plan["changes"]] == ["update"], plan
    cluster.cli("apply", plan["id"], "--wait", check=True)


def _in_long_backoff(cluster) -> int:
    """Wait for the second failure's 30 s backoff; the app's restarts so far."""
    cluster.wait(lambda: cluster.apps()["s/crash/0"]["state"] == "backoff" and
                 cluster.apps()["s/crash/0"]["restarts"] >= 1, timeout=20,
                 what="a 30 s backoff")
    return cluster.apps()["s/crash/0"]["restarts"]


def test_a_shorter_backoff_applies_to_the_wait_under_way(cluster):
    cluster.up(SLOW)
    restarts = _in_long_backoff(cluster)
    began = time.monotonic()
    _apply(cluster, BASE + "backoff = { initial = 1, max = 1 }\n", "fast.toml")
    cluster.wait(lambda: cluster.apps()["s/crash/0"]["restarts"] > restarts, timeout=10,
                 what="the relaunch after the new 1 s backoff")
    assert time.monotonic() - began < 10


def test_restart_never_settles_an_instance_in_backoff(cluster):
    cluster.up(SLOW)
    restarts = _in_long_backoff(cluster)
    _apply(cluster, SLOW.replace('restart = "always"', 'restart = "never"'), "never.toml")
    cluster.wait(lambda: cluster.apps()["s/crash/0"]["state"] == "stopped", timeout=5,
                 what="exited (shown stopped)")
    out = cluster.cli("events", "--kind", "state", "-n", "5", check=True).out
    lines = [json.loads(x) for x in out.splitlines() if x.strip()] \
        if isinstance(out, str) else [out]
    assert lines[-1]["data"]["from"] == "backoff", lines
    assert cluster.apps()["s/crash/0"]["restarts"] == restarts
