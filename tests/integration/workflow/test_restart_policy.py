"""Restart policy with real processes: exponential backoff up to the start limit,
`on-failure` vs `always` vs `never`, health-driven restarts and `after` ordering.

Timings come from the owner's observation ring (`launched` events carry the wall-clock
time the owner spawned the process), so they do not depend on how fast we poll.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from typing import Any

from backend.testing import free_port


def observations(cluster: Any) -> list[dict[str, Any]]:
    with cluster.owner() as c:
        return list(c.call("observations.read", {"after": 0, "limit": 10000})["events"])


def launches(cluster: Any, stack: str, app: str, instance: int = 0) -> list[dict[str, Any]]:
    return [e for e in observations(cluster) if e["kind"] == "launched"
            and (e["stack"], e["app"], e["instance"]) == (stack, app, instance)]


CRASH_LOOP = """
[stacks.crash.apps.loop]
command = ["sh", "-c", "exit 3"]
restart = "on-failure"
backoff = { initial = 0.2, max = 1.2, factor = 2, reset_after = 30 }
start_limit = { burst = 6, interval = 60 }
"""


def test_crash_loop_backs_off_exponentially_then_hits_the_start_limit(cluster):
    cluster.up(CRASH_LOOP)
    cluster.wait(lambda: cluster.apps()["crash/loop/0"]["state"] == "failed", 30,
                 "crash/loop/0 failed")
    time.sleep(1.5)  # longer than the longest backoff: no launch may follow the limit
    row = cluster.apps()["crash/loop/0"]
    assert row["state"] == "failed"
    assert row["last_outcome"] == "start-limit-hit"
    assert row["pid"] is None
    assert row["restarts"] == 5
    at = [e["at"] for e in launches(cluster, "crash", "loop")]
    assert len(at) == 6, at  # burst = 6 starts, then the limit
    gaps = [b - a for a, b in itertools.pairwise(at)]
    # docs/config.md: the first restart of a streak is immediate; restart n >= 2 waits
    # min(initial * factor**(n-2), max)
    assert gaps[0] < 0.15, gaps
    expected = [0.2, 0.4, 0.8, 1.2]
    for gap, want in zip(gaps[1:], expected, strict=True):
        assert want * 0.9 <= gap <= want + 0.4, (gaps, expected)
    for a, b in itertools.pairwise(gaps[1:4]):  # the doubling part
        assert 1.5 <= b / a <= 2.6, gaps
    # every run ended with its own exit status 3 (nothing was killed by the supervisor)
    exits = [e for e in observations(cluster) if e["kind"] == "exit"
             and e["launch_key"].startswith("crash/loop/0/")]
    assert len(exits) == 6 and all(e.get("exit_code") == 3 for e in exits), exits


def _policy_app(name: str, restart: str, script: str, burst: int = 3) -> str:
    return f"""
[stacks.pol.apps.{name}]
command = ["sh", "-c", "{script}"]
restart = "{restart}"
backoff = {{ initial = 0.1, max = 0.8 }}
start_limit = {{ burst = {burst}, interval = 60 }}
"""


POLICIES = "".join([
    _policy_app("onf-zero", "on-failure", "sleep 0.3; exit 0"),
    _policy_app("onf-one", "on-failure", "sleep 0.3; exit 1"),
    _policy_app("alw-zero", "always", "sleep 0.3; exit 0"),
    _policy_app("nev-one", "never", "sleep 0.3; exit 1"),
    _policy_app("nev-kill", "never", "exec sleep 1000"),
    _policy_app("onf-kill", "on-failure", "exec sleep 1000"),
    _policy_app("alw-kill", "always", "exec sleep 1000"),
])


def test_on_failure_always_never_with_exit_0_exit_1_and_sigkill(cluster):
    cluster.up(POLICIES)
    apps = cluster.wait_ready(3)  # the three long-running apps at least
    victims = {k: apps[f"pol/{k}/0"]["pid"] for k in ("nev-kill", "onf-kill", "alw-kill")}
    assert all(victims.values()), apps
    for pid in victims.values():
        os.kill(pid, signal.SIGKILL)

    def settled() -> bool:
        a = cluster.apps()
        return (a["pol/onf-one/0"]["state"] == "failed"
                and a["pol/alw-zero/0"]["state"] == "failed"
                and a["pol/onf-zero/0"]["state"] == "stopped"
                and a["pol/nev-one/0"]["state"] == "stopped"
                and a["pol/nev-kill/0"]["state"] == "stopped"
                and a["pol/onf-kill/0"]["ready"] and a["pol/alw-kill/0"]["ready"]
                and a["pol/onf-kill/0"]["pid"] != victims["onf-kill"]
                and a["pol/alw-kill/0"]["pid"] != victims["alw-kill"])
    cluster.wait(settled, 30, "every policy settled")
    a = cluster.apps()

    # on-failure: exit 0 is the end; exit 1 is retried until the start limit
    assert (a["pol/onf-zero/0"]["detail"], a["pol/onf-zero/0"]["last_outcome"],
            a["pol/onf-zero/0"]["restarts"]) == ("exited", "success", 0)
    assert (a["pol/onf-one/0"]["last_outcome"], a["pol/onf-one/0"]["restarts"]) == \
        ("start-limit-hit", 2)
    # always: even a clean exit is restarted (until the start limit)
    assert (a["pol/alw-zero/0"]["last_outcome"], a["pol/alw-zero/0"]["restarts"]) == \
        ("start-limit-hit", 2)
    # never: neither a failure nor a signal is restarted
    assert (a["pol/nev-one/0"]["detail"], a["pol/nev-one/0"]["last_outcome"],
            a["pol/nev-one/0"]["restarts"]) == ("exited", "exit-code", 0)
    assert (a["pol/nev-kill/0"]["detail"], a["pol/nev-kill/0"]["last_outcome"],
            a["pol/nev-kill/0"]["restarts"], a["pol/nev-kill/0"]["pid"]) == \
        ("exited", "signal", 0, None)
    # on-failure and always: SIGKILL is a failure, restarted with a fresh process
    for k in ("onf-kill", "alw-kill"):
        row = a[f"pol/{k}/0"]
        assert row["restarts"] == 1 and row["last_outcome"] == "signal", row
    time.sleep(0.5)  # nothing more happens to the settled ones
    assert len(launches(cluster, "pol", "onf-zero")) == 1
    assert len(launches(cluster, "pol", "nev-one")) == 1
    assert len(launches(cluster, "pol", "nev-kill")) == 1
    assert len(launches(cluster, "pol", "onf-one")) == 3
    assert len(launches(cluster, "pol", "alw-zero")) == 3


def test_failing_http_health_check_restarts_the_app(cluster):
    bad, good = free_port(), free_port()

    def server(name: str, port: int, path: str) -> str:
        return f"""
[stacks.h.apps.{name}]
command = ["python3", "-m", "http.server", "{port}", "--bind", "127.0.0.1"]
cwd = "/"
backoff = {{ initial = 0.1, max = 0.8 }}
start_limit = {{ burst = 30, interval = 60 }}
ready = {{ kind = "tcp", port = {port}, timeout = 10 }}
health = {{ kind = "http", url = "http://127.0.0.1:{port}{path}", interval = 0.2, \
timeout = 1, failures = 2 }}
"""
    cluster.up(server("sick", bad, "/no-such-path-404") + server("well", good, "/"))
    first = cluster.wait_ready(2)
    cluster.wait(lambda: cluster.apps()["h/sick/0"]["restarts"] >= 2, 30,
                 "two health restarts")
    a = cluster.apps()
    sick = a["h/sick/0"]
    assert sick["last_outcome"] == "health", sick
    assert sick["pid"] != first["h/sick/0"]["pid"] or sick["state"] != "ready"
    assert len(launches(cluster, "h", "sick")) >= 3
    # the healthy neighbour was checked as often and never restarted
    assert a["h/well/0"]["restarts"] == 0
    assert a["h/well/0"]["pid"] == first["h/well/0"]["pid"]
    # a health restart is a stop by the supervisor (SIGTERM), not a crash of the app
    sick_exits = [e for e in observations(cluster) if e["kind"] == "exit"
                  and e["launch_key"].startswith("h/sick/0/")]
    assert sick_exits and all(e.get("signal") == signal.SIGTERM for e in sick_exits), \
        sick_exits


AFTER = """
[stacks.ord.apps.a]
command = ["sleep", "1000"]
ready = { kind = "delay", delay = 0.6 }

[stacks.ord.apps.b]
command = ["sleep", "1000"]
after = ["a"]
ready = { kind = "delay", delay = 0.3 }

[stacks.ord.apps.c]
command = ["sleep", "1000"]
after = ["b", "a"]
"""


def test_after_ordering_waits_for_readiness(cluster):
    cluster.up(AFTER)
    cluster.wait_ready(3)
    a = launches(cluster, "ord", "a")
    b = launches(cluster, "ord", "b")
    c = launches(cluster, "ord", "c")
    assert len(a) == len(b) == len(c) == 1
    # b starts only once a is ready (0.6 s after its launch), c once b is ready
    assert b[0]["at"] - a[0]["at"] >= 0.55, (a, b)
    assert c[0]["at"] - b[0]["at"] >= 0.25, (b, c)
