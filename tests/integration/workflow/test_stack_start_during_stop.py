"""`tenure stack start S` while `tenure stack stop S` still stops slow instances (a TERM
trap that sleeps): the latest command wins. The stop answers at once that the start
superseded it; the start answers once every instance is up again, the slow ones started
as soon as they had stopped. Before, both commands waited their whole 300 s and the slow
instances stayed stopped for good under a `running` intent."""

from __future__ import annotations

import json
import time
from typing import Any

CONFIG = """
[stacks.s.apps.slow]
command = ["sh", "-c", "trap 'sleep 2; exit 0' TERM; while :; do sleep 0.2; done"]
instances = 2
restart = "always"
ready = { kind = "delay", delay = 0.5 }
[stacks.s.apps.slow.stop]
signal = "TERM"
timeout = 10

[stacks.s.apps.quick]
command = ["sh", "-c", "exec sleep 100000"]
"""
SLOW = ["s/slow/0", "s/slow/1"]


def test_stack_start_during_a_slow_stack_stop_wins_and_neither_waits_out(
        cluster: Any) -> None:
    cluster.up(CONFIG)
    before = {k: v["pid"] for k, v in cluster.wait_ready(3).items()}
    digest = cluster.cli("stack", "stop", "s", "--dry-run", check=True).out["digest"]
    stop = cluster.follow("--json", "stack", "stop", "s", "--digest", digest)
    try:
        cluster.wait(lambda: all(cluster.apps()[k]["state"] == "stopping" for k in SLOW),
                     20, "the slow instances stopping")
        t0 = time.monotonic()
        started = cluster.cli("stack", "start", "s", timeout=40)
        took = time.monotonic() - t0
        out, err = stop.communicate(timeout=10)   # it answered long before
    finally:
        if stop.poll() is None:
            stop.kill()
            stop.communicate()
    stopped = json.loads(out)
    assert stop.returncode == 0, (out, err)
    assert stopped["superseded"] == {"by": "stack start", "intent": "running",
                                     "revision": 2}, stopped
    assert [stopped["instances"][k] for k in SLOW] == ["stopping"] * 2, stopped

    assert started.ok, started
    assert started.out["intent"] == "running" and started.out["settled"], started
    assert started.out["instances"] == dict.fromkeys([*SLOW, "s/quick/0"], "ready")
    assert took < 20, took   # the 2 s trap and the 0.5 s readiness, not 300 s
    apps = cluster.apps()
    assert all(apps[k]["ready"] and apps[k]["pid"] not in (None, before[k])
               for k in before), apps
    assert cluster.status()["intents"]["s"] == {"intent": "running", "revision": 2}
