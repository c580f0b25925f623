"""A hot upgrade while a queued config waits (an open operation holds its stack) keeps
an instance in backoff as it was. Was: the new generation treated it as a cold start
decided by the queued config, stopped every instance in backoff and deferred it: its
deadline and streak were lost, and it was started at once when the config was taken.
Real daemons."""

from __future__ import annotations

from backend import queuefile

CONFIG = """
[stacks.s.apps.slow]
command = ["sleep", "100000"]
ready = {{ kind = "delay", delay = {delay} }}
env = {{ N = "{n}" }}

[stacks.t.apps.crash]
command = ["sh", "-c", "sleep 0.2; exit 1"]
restart = "always"
backoff = {{ initial = 60, max = 120 }}
"""


def test_a_backoff_survives_an_upgrade_while_a_queued_config_waits(cluster):
    cluster.up(CONFIG.format(delay=0.1, n=1))
    cluster.wait(lambda: cluster.apps()["t/crash/0"]["state"] == "backoff", 30,
                 "the crashing app in its 60 s backoff")
    before = cluster.apps()["t/crash/0"]
    # an operation that holds stack s for a while (a rolling restart, ready after 20 s)
    cluster.cli("up", "--no-wait", "--config",
                str(cluster.write_config(CONFIG.format(delay=20, n=2), "b.toml")),
                check=True)
    queuefile.queue(cluster.layout.queued_config, CONFIG.format(delay=20, n=3),
                    "/queued.toml")
    cluster.wait(lambda: cluster.status()["queued_config"] is not None, 10,
                 "the queued config waiting for the operation")
    rid = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    act = cluster.cli("backend", "upgrade", rid, check=True).out["activation"]
    assert act["outcome"] == "success", act
    after = cluster.apps()["t/crash/0"]
    assert after["state"] == "backoff", after
    assert after["restarts"] == before["restarts"], (before, after)
