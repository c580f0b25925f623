"""`tenure events` through a real tenure: a crashing app's exits, restarts and state
changes in order; filters; one JSON object per line; a follower that lives through a
backend upgrade misses nothing and repeats nothing; --since resumes after an id."""

from __future__ import annotations

import json
import time
from typing import Any

CONFIG = """
[stacks.s.apps.crasher]
command = ["sh", "-c", "sleep 0.3; exit 3"]
restart = "on-failure"
backoff = { initial = 0.2, max = 0.2 }
start_limit = { burst = 100, interval = 60 }

[stacks.s.apps.sleeper]
command = ["sleep", "infinity"]
"""


def _events(cluster: Any, *args: str) -> list[dict[str, Any]]:
    res = cluster.cli("events", *args, check=True)
    out = res.out
    if out is None:   # nothing to show: no output
        return []
    lines = out.splitlines() if isinstance(out, str) else [json.dumps(out)]
    return [json.loads(ln) for ln in lines if ln.strip()]


def test_a_crashing_app_is_told_in_order_and_filters_apply(cluster):
    cluster.up(CONFIG)

    def two_restarts() -> bool:
        return sum(e["kind"] == "restart" for e in _events(cluster, "s/crasher")) >= 2
    cluster.wait(two_restarts, 30, "two restarts of the crasher")
    crasher = _events(cluster, "s/crasher", "-n", "1000")
    assert {e["target"] for e in crasher} == {"s/crasher/0"}
    ids = [e["id"] for e in crasher]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    exits = [e["data"] for e in crasher if e["kind"] == "exit"]
    assert exits[0]["exit_code"] == 3 and exits[0]["requested"] is False
    states = [(e["data"]["from"], e["data"]["to"]) for e in crasher if e["kind"] == "state"]
    assert ("stopped", "starting") in states and ("ready", "backoff") in states
    only_exits = _events(cluster, "--kind", "exit", "-n", "1000")
    assert only_exits and {e["kind"] for e in only_exits} == {"exit"}
    assert len(_events(cluster, "-n", "2")) == 2
    human = cluster.cli_text("events", "s/crasher", "-n", "5")
    assert "s/crasher/0 exit: pid" in human and "exited 3" in human
    missing = cluster.cli("events", "nope")
    assert missing.code == 1 and "NOT_FOUND" in missing.stderr + json.dumps(missing.out)


def test_what_a_command_did_is_in_the_events_as_soon_as_it_returned(cluster):
    """Events are written every 0.5 s; a read writes what is pending first."""
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    for n in range(1, 4):
        cluster.cli("restart", "s/sleeper", check=True)
        restarts = [e["data"]["restarts"] for e in _events(cluster, "s/sleeper", "-n", "5")
                    if e["kind"] == "restart"]
        assert restarts and restarts[-1] == n, restarts


def test_a_follower_lives_through_an_upgrade_and_since_resumes(cluster):
    cluster.up(CONFIG)
    cluster.wait(lambda: any(e["kind"] == "restart" for e in _events(cluster)), 30,
                 "a restart")
    old = cluster.status()["backend"]["activation"]
    follower = cluster.follow("--json", "events", "-f", "-n", "0")
    try:
        time.sleep(1.0)
        release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
        up = cluster.cli("backend", "upgrade", release, timeout=300)
        assert up.ok and up.out["activation"]["phase"] == "complete", up
        new = cluster.status()["backend"]["activation"]
        last = _events(cluster, "-n", "1")[0]["id"]
        cluster.wait(lambda: _events(cluster, "-n", "1")[0]["id"] > last + 3, 30,
                     "events after the upgrade")
        time.sleep(1.0)                      # the follower polls every 0.25 s
    finally:
        follower.terminate()
        out, _ = follower.communicate(timeout=30)
    seen = [json.loads(ln) for ln in out.splitlines()]
    ids = [e["id"] for e in seen]
    assert ids == list(range(ids[0], ids[0] + len(ids))), "a gap or a repeat"
    phases = [(e["activation"], e["data"]["phase"]) for e in seen if e["kind"] == "handoff"]
    assert [p for a, p in phases if a == old] == ["draining", "drained", "checkpointed",
                                                  "retiring"], phases
    assert (new, "adopted") in phases
    after = _events(cluster, "--since", str(ids[5]), "-n", "1000")
    assert [e["id"] for e in after][:3] == ids[6:9]


def test_a_follower_ends_when_tenure_is_stopped(cluster):
    """It waited 120 s for a backend that `tenure down` had ended, saying nothing."""
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    follower = cluster.follow("events", "-f", "-n", "0")
    try:
        time.sleep(1.0)
        assert cluster.down().ok
        code = follower.wait(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
        _, err = follower.communicate(timeout=30)
    assert code == 0 and "tenure: events: tenure stopped; -f ends here" in err, err


def test_events_of_removed_instances_are_still_read_and_followed(cluster):
    """A follower of an app ended with NOT_FOUND when the app was removed, before it
    printed the app's last events; and the events of an instance scaled away could not
    be read any more."""
    two = '[stacks.s.apps.tick]\ncommand = ["sleep", "100000"]\ninstances = 2\n'
    other = '[stacks.s.apps.other]\ncommand = ["sleep", "100000"]\n'
    cluster.up(two + other)
    cluster.wait_ready(3)
    follower = cluster.follow("--json", "events", "-f", "-n", "0", "s/tick")
    try:
        time.sleep(1.0)
        cluster.cli("up", "--config", str(cluster.write_config(other, "t2.toml")),
                    check=True)
        cluster.wait(lambda: "s/tick/0" not in cluster.apps(), 30, "tick removed")
        time.sleep(1.0)                      # the follower polls every 0.25 s
        assert follower.poll() is None, follower.communicate(timeout=30)
    finally:
        follower.terminate()
        out, err = follower.communicate(timeout=30)
    seen = [json.loads(ln) for ln in out.splitlines()]
    assert {e["target"] for e in seen} == {"s/tick/0", "s/tick/1"}, (seen, err)
    assert any(e["kind"] == "exit" for e in seen), seen
    gone = _events(cluster, "s/tick/1")
    assert gone and all(e["target"] == "s/tick/1" for e in gone), gone


SPIN = """
[stacks.z.apps.spin]
command = ["true"]
restart = "always"
backoff = { initial = 0, max = 0 }
start_limit = { burst = 100000, interval = 1 }
"""


def test_the_last_n_events_past_a_page_come_whole_and_in_order(cluster):
    """`events -n N` of more than a page (1,000): was one answer, past the frame limit
    at ~40,000 events (INTERNAL); now pages, and the page boundary loses and repeats
    nothing."""
    cluster.up(SPIN)
    cluster.wait(lambda: _events(cluster, "-n", "1")[0]["id"] > 1600, 60, "1,600 events")
    assert cluster.cli("stop", "z/spin").code == 0
    last = _events(cluster, "-n", "1")[0]["id"]
    got = _events(cluster, "-n", "1300")
    assert [e["id"] for e in got] == list(range(last - 1299, last + 1)), \
        [e["id"] for e in got][:5]


QUICK = """
[stacks.z.apps.quick]
command = ["sh", "-c", "exit 7"]
backoff = { initial = 0.05, max = 0.05 }
start_limit = { burst = 30, interval = 60 }
"""


def test_every_run_of_a_crash_loop_has_its_exit_event(cluster):
    """An exit that overtook its launch's answer was not recorded: 22 exits for 30 runs."""
    cluster.up()
    cluster.cli("up", "--config", str(cluster.write_config(QUICK)))   # started: it ran
    cluster.wait(lambda: cluster.call("status")["apps"][0]["state"] == "failed", 60,
                 "the start limit")
    got = _events(cluster, "z/quick", "--kind", "exit", "-n", "1000")
    assert len(got) == 30, [e["data"] for e in got]
    assert all(e["data"]["exit_code"] == 7 and e["data"]["pid"] for e in got)
    assert len({e["data"]["pid"] for e in got}) == 30


def test_a_follower_ended_by_down_misses_nothing_the_last_backend_recorded(cluster):
    """Events recorded after the follower's last page and before `down` retired the
    backend were skipped: it found tenure stopped and ended. It reads them from
    backend.db now. The follower is held (SIGSTOP) while they happen."""
    import signal
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    follower = cluster.follow("--json", "events", "-f", "-n", "0", "s/sleeper")
    try:
        time.sleep(1.0)
        follower.send_signal(signal.SIGSTOP)
        before = _events(cluster, "-n", "1")[0]["id"]
        assert cluster.cli("restart", "s/sleeper").code == 0
        recorded = [e["id"] for e in _events(cluster, "s/sleeper", "-n", "1000")]
        assert cluster.down().ok
        follower.send_signal(signal.SIGCONT)
        code = follower.wait(timeout=60)
    finally:
        if follower.poll() is None:
            follower.send_signal(signal.SIGCONT)
            follower.kill()
        out, err = follower.communicate(timeout=30)
    assert code == 0 and "tenure: events: tenure stopped; -f ends here" in err, err
    seen = [json.loads(ln)["id"] for ln in out.splitlines() if ln.strip()]
    restart = [i for i in recorded if i > before]   # the restart's, and after
    assert restart and set(restart) <= set(seen), (before, recorded, seen)
    assert seen == sorted(set(seen)), seen
