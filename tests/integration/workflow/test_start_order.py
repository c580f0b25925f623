"""`after` orders every start, not only an apply's: `tenure start` of a stack,
`tenure stack start` and `tenure up` after `down` launch an app only once the apps it
starts after are ready (launch times from the owner's observation ring). A stop asked
while a start waits withdraws it."""

from __future__ import annotations

from typing import Any

ORDERED = """
[stacks.o.apps.db]
command = ["sleep", "1000"]
ready = { kind = "delay", delay = 0.8 }

[stacks.o.apps.api]
command = ["sleep", "1000"]
after = ["db"]
"""


def _launched_at(cluster: Any) -> dict[str, list[float]]:
    """App -> the owner's launch times of its instance 0, oldest first."""
    with cluster.owner() as c:
        events = c.call("observations.read", {"after": 0, "limit": 10000})["events"]
    out: dict[str, list[float]] = {}
    for e in events:
        if e["kind"] == "launched" and e["stack"] == "o":
            out.setdefault(e["app"], []).append(e["at"])
    return out


def _api_after_db(cluster: Any) -> None:
    at = _launched_at(cluster)
    assert at["api"][-1] - at["db"][-1] >= 0.75, at   # db ready 0.8 s after its launch


def test_start_stack_start_and_up_after_down_wait_for_after(cluster: Any) -> None:
    cluster.up(ORDERED)
    cluster.wait_ready(2)
    _api_after_db(cluster)                               # an apply's levels

    cluster.cli("stop", "o", check=True)
    started = cluster.cli("start", "o", check=True).out
    assert started["settled"] is True, started           # the command waited for api too
    _api_after_db(cluster)                               # was: both in the same ms

    digest = cluster.cli("stack", "stop", "o", "--dry-run", check=True).out["digest"]
    cluster.cli("stack", "stop", "o", "--digest", digest, check=True)
    cluster.cli("stack", "start", "o", check=True)
    _api_after_db(cluster)

    cluster.down()
    cluster.up()                                         # a new owner: a new ring
    cluster.wait_ready(2)
    _api_after_db(cluster)


def test_a_stop_withdraws_a_start_that_waits_for_its_after_apps(cluster: Any) -> None:
    cluster.up(ORDERED.replace("delay = 0.8", "delay = 3"))
    cluster.wait_ready(2)
    cluster.cli("stop", "o", check=True)
    waiting = cluster.follow("start", "o")               # db starts, api waits
    try:
        cluster.wait(lambda: cluster.apps()["o/db/0"]["state"] == "running", 10,
                     "db starting")
        cluster.cli("stop", "o/api", check=True)         # the latest intent wins
        waiting.communicate(timeout=30)
    finally:
        waiting.kill()
        waiting.communicate()
    cluster.wait_ready(1)
    apps = cluster.apps()
    assert apps["o/api/0"]["state"] == "stopped", apps
    assert len(_launched_at(cluster)["api"]) == 1        # only its first launch


def test_a_stop_ends_a_start_or_restart_waiting_for_readiness(cluster: Any) -> None:
    cluster.up(ORDERED.replace("delay = 0.8", "delay = 5"))
    for command in (("restart", "o/db"), ("start", "o/db")):
        if command[0] == "start":
            cluster.cli("stop", "o/db", check=True)
        waiting = cluster.follow("--json", *command)       # up to 120 s for ready
        try:
            cluster.wait(lambda: cluster.apps()["o/db/0"]["state"] == "running", 10,
                         "db launched")
            cluster.cli("stop", "o/db", check=True)
            out, _ = waiting.communicate(timeout=30)       # was: its whole --timeout
        finally:
            waiting.kill()
            waiting.communicate()
        assert waiting.returncode == 4 and '"settled": false' in out, (command, out)
        assert cluster.apps()["o/db/0"]["state"] == "stopped"


def test_a_stop_during_a_rolling_restart_fails_its_step_at_once_saying_so(cluster: Any
                                                                          ) -> None:
    cluster.up(ORDERED)
    cluster.wait_ready(2)
    slow = ORDERED.replace('command = ["sleep", "1000"]\nready = { kind = "delay", '
                           'delay = 0.8 }', 'command = ["sleep", "1001"]\nready = '
                           '{ kind = "delay", delay = 20 }')
    assert slow != ORDERED
    with cluster.api() as c:                       # a new definition of db: a restart
        plan = c.call("plan", {"config_text": slow, "source": "t.toml"})
        op = c.call("apply", {"plan": plan["id"]})
    cluster.wait(lambda: cluster.apps()["o/db/0"]["state"] == "running", 20, "db relaunched")
    cluster.cli("stop", "o/db", check=True)
    ended = cluster.cli("op", "show", op["id"], "--wait", "--timeout", "15")
    assert ended.code == 1 and ended.out["outcome"] == "failed", ended  # was: 60 s, then
    assert "o/db/0 stopped by a stop asked while this step waited" in ended.out["error"]


def test_status_says_an_applys_later_level_starts_once_its_after_apps_are_ready(
        cluster: Any) -> None:
    """Was: `never started` for the whole wait, as after an apply that failed."""
    flag = cluster.home / "db.ready"
    cluster.up('[stacks.x.apps.idle]\ncommand = ["sleep", "1000"]\n')
    gated = ORDERED.replace('{ kind = "delay", delay = 0.8 }',
                            f'{{ kind = "exec", command = ["test", "-e", "{flag}"], '
                            'timeout = 60 }')
    assert gated != ORDERED
    with cluster.api() as c:
        plan = c.call("plan", {"config_text": gated, "source": "t.toml"})
        c.call("apply", {"plan": plan["id"]})
    cluster.wait(lambda: cluster.apps()["o/db/0"]["state"] == "running", 20, "db launched")
    api = {r["key"]: r for r in cluster.cli("status", check=True).out["apps"]}["o/api/0"]
    assert (api["state"], api["reason"]) == ("stopped", "starts once o/db/0 is ready"), api
    flag.touch()
    cluster.wait(lambda: cluster.apps()["o/api/0"]["state"] == "ready", 30, "api ready")
    assert cluster.apps()["o/api/0"]["reason"] is None
