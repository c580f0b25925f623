"""`tenure stack stop STACK --dry-run` / `--digest D`: the reviewed stop is durable — it
survives a backend SIGKILL (the guardian recovers the backend) and a backend handoff
without anything of the stack coming back — until `tenure stack start STACK`."""

from __future__ import annotations

import time
from typing import Any

CONFIG = """
[stacks.s.apps.a]
command = ["sleep", "1000"]
restart = "always"

[stacks.s.apps.b]
command = ["sh", "-c", "while :; do echo tick; sleep 0.2; done"]
restart = "always"
after = ["a"]

[stacks.t.apps.keep]
command = ["sleep", "1000"]
"""


def observations(cluster: Any) -> list[dict[str, Any]]:
    with cluster.owner() as c:
        return list(c.call("observations.read", {"after": 0, "limit": 10000})["events"])


def s_launches(cluster: Any) -> list[dict[str, Any]]:
    return [e for e in observations(cluster) if e["kind"] == "launched" and e["stack"] == "s"]


def certify(cluster: Any) -> None:
    """Wait until the backend published a recovery certificate of the current state
    (it does so by itself every 5 s when quiet; asking saves the wait)."""
    cluster.wait(lambda: cluster.call("generation.certify")["published"], 30,
                 "a recovery certificate")


def assert_s_stopped(cluster: Any, keep_pid: int, launches_before: int) -> None:
    apps = cluster.apps()
    for key in ("s/a/0", "s/b/0"):
        assert apps[key]["state"] == "stopped" and apps[key]["pid"] is None, apps[key]
    assert apps["t/keep/0"]["pid"] == keep_pid and apps["t/keep/0"]["ready"]
    assert cluster.status()["intents"]["s"]["intent"] == "stopped"
    with cluster.owner() as c:
        assert c.call("stack.intents")["intents"]["s"]["intent"] == "stopped"
    assert len(s_launches(cluster)) == launches_before


def test_stack_stop_by_digest_survives_backend_kill_and_handoff(cluster):
    cluster.up(CONFIG)
    apps = cluster.wait_ready(3)
    keep_pid = apps["t/keep/0"]["pid"]
    s_pids = {apps["s/a/0"]["pid"], apps["s/b/0"]["pid"]}

    review = cluster.cli("stack", "stop", "s", "--dry-run", check=True).out
    assert sorted(r["launch_key"].rsplit("/", 1)[0] for r in review["will_stop"]) == \
        ["s/a/0", "s/b/0"]
    assert {r["pid"] for r in review["will_stop"]} == s_pids
    digest = review["digest"]
    assert digest
    # a dry run changes nothing and is repeatable
    assert cluster.cli("stack", "stop", "s", "--dry-run", check=True).out["digest"] == digest
    assert all(r["ready"] for r in cluster.apps().values())

    wrong = cluster.cli("stack", "stop", "s", "--digest", "0" * len(digest))
    assert wrong.code == 1 and wrong.out["error"]["code"] == "STALE_PLAN", wrong
    assert all(r["ready"] for r in cluster.apps().values())

    stopped = cluster.cli("stack", "stop", "s", "--digest", digest, check=True).out
    assert stopped["intent"] == "stopped" and stopped["settled"], stopped
    n = len(s_launches(cluster))
    assert_s_stopped(cluster, keep_pid, n)
    # the reviewed digest is used up: the stack changed since
    again = cluster.cli("stack", "stop", "s", "--digest", digest)
    assert again.code == 1 and again.out["error"]["code"] == "STALE_PLAN", again

    # backend SIGKILL: the guardian starts a new generation; the stack stays stopped
    certify(cluster)
    killed = cluster.kill_backend()
    cluster.wait(lambda: cluster.backend_pid() != killed, 60, "a recovered backend")
    time.sleep(1.0)  # room for a wrong restart to show up
    assert_s_stopped(cluster, keep_pid, n)

    # backend handoff: the same
    release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    up = cluster.cli("backend", "upgrade", release, timeout=300)
    assert up.ok and up.out["activation"]["phase"] == "complete", up
    time.sleep(1.0)
    assert_s_stopped(cluster, keep_pid, n)
    started = cluster.cli("start", "s/a")
    assert started.code == 1, started
    assert started.out["error"]["code"] in ("STACK_FENCED", "CONFLICT"), started
    assert len(s_launches(cluster)) == n

    # stack start brings it back
    back = cluster.cli("stack", "start", "s", check=True).out
    assert back["intent"] == "running", back
    apps = cluster.wait_ready(3)
    assert apps["s/a/0"]["pid"] and apps["s/b/0"]["pid"]
    assert not {apps["s/a/0"]["pid"], apps["s/b/0"]["pid"]} & s_pids
    assert apps["t/keep/0"]["pid"] == keep_pid
    assert cluster.status()["intents"]["s"]["intent"] == "running"
