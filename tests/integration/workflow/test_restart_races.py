"""`tenure start` / `stop` / `restart` with real processes where they used to go wrong:
two restarts of one instance at once left a start armed that undid the operator's later
stop; a stop after a restart of an app slow to stop was undone the same way; a rolling
restart went on past an instance that did not come back ready and took the whole app
down; `tenure start` of an instance in backoff was ignored."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from backend.testing import CliResult

_STOPS_IN_3_S = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: "
                      "(time.sleep(3), sys.exit(0))); time.sleep(1009)")
SLOW_TO_STOP = f"""
[stacks.d.apps.s]
command = ["{sys.executable}", "-c", "{_STOPS_IN_3_S}"]
ready = {{ kind = "delay", delay = 0.5 }}
"""   # 3 s to stop after SIGTERM (its handler is in place by the time it is ready)
SLOW_STOP = """
[stacks.g.apps.slowstop]
command = ["sh", "-c", "trap '' TERM; exec sleep 1009"]
ready = { kind = "delay", delay = 0.5 }
stop = { timeout = 3, kill_after = 2 }
"""


def row(cluster: Any, key: str) -> dict[str, Any]:
    return cluster.apps()[key]


def state_changes(cluster: Any, key: str) -> list[tuple[str, str]]:
    """(from, to) of each public state change of ``key``, oldest first (`tenure --json
    events` prints one JSON object a line)."""
    out = cluster.cli("events", key, "--kind", "state", "-n", "1000", check=True).out
    lines = out.splitlines() if isinstance(out, str) else [json.dumps(out)]
    events = [json.loads(ln) for ln in lines if ln.strip()]
    return [(e["data"]["from"], e["data"]["to"]) for e in events]


def in_background(cluster: Any, *args: str) -> tuple[threading.Thread, list[CliResult]]:
    """`tenure ARGS` run in a thread: the thread, started, and the list its result
    lands in."""
    got: list[CliResult] = []
    t = threading.Thread(target=lambda: got.append(cluster.cli(*args)), daemon=True)
    t.start()
    return t, got


def test_two_concurrent_restarts_then_a_stop_leave_the_app_stopped(cluster):
    cluster.up(SLOW_TO_STOP)
    cluster.wait_ready(1)
    t, first = in_background(cluster, "restart", "d/s/0", "--timeout", "10")
    cluster.wait(lambda: row(cluster, "d/s/0")["state"] == "stopping", 10, "stopping")
    second = cluster.cli("restart", "d/s/0", "--timeout", "10")   # while it stops
    t.join(60)
    for res in (first[0], second):
        assert res.code == 0 and res.out == {"settled": True,
                                             "instances": {"d/s/0": "ready"}}, res
    assert row(cluster, "d/s/0")["generation"] == 2   # restarted once

    stop = cluster.cli("stop", "d/s/0", "--timeout", "10", timeout=30)
    assert stop.code == 0 and stop.out["instances"] == {"d/s/0": "stopped"}, stop
    time.sleep(1.5)   # a start left armed would act at once
    after = row(cluster, "d/s/0")
    assert (after["state"], after["pid"], after["generation"]) == ("stopped", None, 2)
    assert state_changes(cluster, "d/s/0")[-1] == ("stopping", "stopped")


def test_a_stop_after_a_restart_of_an_app_slow_to_stop_is_not_undone(cluster):
    cluster.up(SLOW_STOP)
    cluster.wait_ready(1)
    restart = cluster.cli("restart", "g/slowstop/0", "--timeout", "1")
    assert restart.code == 4, restart
    said = restart.out.pop("reasons")["g/slowstop/0"]   # why it is not up yet
    assert said.startswith("SIGTERM sent ") and "; SIGKILL in " in said, said
    assert restart.out == {"settled": False, "instances": {"g/slowstop/0": "stopping"},
                           "not_restarted": [], "stopped_at": "g/slowstop/0"}
    stop = cluster.cli("stop", "g/slowstop/0", "--timeout", "30", timeout=60)
    assert stop.code == 0 and stop.out["instances"] == {"g/slowstop/0": "stopped"}, stop
    time.sleep(1.5)
    after = row(cluster, "g/slowstop/0")
    assert (after["state"], after["generation"]) == ("stopped", 1), after
    assert state_changes(cluster, "g/slowstop/0")[-1] == ("stopping", "stopped")


def test_a_rolling_restart_stops_at_an_instance_that_is_not_ready(cluster):
    flag = cluster.home / "okflag"
    flag.touch()
    cluster.up(f"""
[stacks.g.apps.roll]
command = ["sleep", "1009"]
instances = 3
ready = {{ kind = "exec", command = ["test", "-e", "{flag}"], timeout = 20 }}
""")
    before = cluster.wait_ready(3)
    flag.unlink()
    t0 = time.monotonic()
    res = cluster.cli("restart", "g/roll", "--timeout", "2", timeout=60)
    assert time.monotonic() - t0 < 8
    assert res.code == 4, res
    said = res.out.pop("reasons")["g/roll/0"]   # why the roll stopped there
    assert said == f"readiness: exec test -e {flag}: exit 1" or \
        said.startswith(f"waiting for readiness: exec test -e {flag} "), said
    assert res.out == {"settled": False, "instances": {"g/roll/0": "running"},
                       "not_restarted": ["g/roll/1", "g/roll/2"],
                       "stopped_at": "g/roll/0"}
    after = cluster.apps()
    assert after["g/roll/0"]["generation"] == 2
    for key in ("g/roll/1", "g/roll/2"):   # untouched
        assert (after[key]["state"], after[key]["pid"]) == ("ready", before[key]["pid"])
    flag.touch()
    cluster.wait_ready(3)


def test_start_in_backoff_launches_at_once(cluster):
    cluster.up("""
[stacks.d.apps.bo]
command = ["sh", "-c", "exit 2"]
backoff = { initial = 30, max = 30 }
start_limit = { burst = 3, interval = 100 }
""")
    cluster.wait(lambda: row(cluster, "d/bo/0")["state"] == "backoff", 20, "backoff")
    assert row(cluster, "d/bo/0")["generation"] == 2   # the third launch is 30 s away
    cluster.cli("start", "d/bo", "--timeout", "1", timeout=30)
    assert row(cluster, "d/bo/0")["generation"] >= 3   # launched now, not in 30 s
    # a new window: its first start and one restart at once, then the backoff
    cluster.wait(lambda: row(cluster, "d/bo/0")["state"] == "backoff", 20, "backoff")
    assert row(cluster, "d/bo/0")["generation"] == 4


def test_a_restart_the_start_limit_would_refuse_is_not_promised(cluster):
    """Was `backoff … next start in 30s` for 30 s, then `failed` without a start: the
    third start would pass the limit (2 in 100 s), so the second failure gives up."""
    cluster.up("""
[stacks.d.apps.bo]
command = ["sh", "-c", "exit 2"]
backoff = { initial = 30, max = 30 }
start_limit = { burst = 2, interval = 100 }
""", timeout=20)
    cluster.wait(lambda: row(cluster, "d/bo/0")["state"] == "failed", 20, "failed")
    r = row(cluster, "d/bo/0")
    assert r["generation"] == 2 and r["next_start_in"] is None, r
    assert r["last_outcome"] == "start-limit-hit", r


def test_a_stop_of_an_instance_the_roll_has_not_reached_is_not_undone(cluster):
    """The latest command wins: a roll started instance 1 again after `tenure stop`
    had stopped it (and said so) while the roll was stopping instance 0."""
    cluster.up(SLOW_TO_STOP.replace('ready = {', 'instances = 2\nready = {'))
    cluster.wait_ready(2)
    t, roll = in_background(cluster, "restart", "d/s", "--timeout", "20")
    cluster.wait(lambda: row(cluster, "d/s/0")["state"] == "stopping", 10, "stopping 0")
    stop = cluster.cli("stop", "d/s/1", "--timeout", "20", timeout=60)
    assert stop.code == 0 and stop.out["instances"] == {"d/s/1": "stopped"}, stop
    t.join(60)
    res = roll[0]
    assert res.code == 4 and res.out["stopped_at"] == "d/s/1", res
    assert res.out["withdrawn"] is True and res.out["instances"]["d/s/0"] == "ready", res
    time.sleep(1.0)
    assert row(cluster, "d/s/1")["state"] == "stopped", row(cluster, "d/s/1")
