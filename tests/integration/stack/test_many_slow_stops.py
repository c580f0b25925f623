"""Stopping more apps at once than the owner used to handle on one connection, each
taking seconds to end: every stop is sent and waited for at once, and the backend's
link to the owner stays up meanwhile (its heartbeat is not starved behind them)."""

from __future__ import annotations

from pathlib import Path

APPS = 80            # above the 64 requests the owner once handled per connection
STOP_SECONDS = 3     # above the heartbeat's 2 s timeout


def _slow_stoppers(n: int) -> str:
    # on SIGTERM (sent to the group: the `sleep 1` ends at once) the shell takes
    # STOP_SECONDS to exit
    script = f"trap 'sleep {STOP_SECONDS}; exit 0' TERM; while :; do sleep 1; done"
    return "".join(f'[stacks.slow.apps.s{i:03d}]\ncommand = ["/bin/sh", "-c", "{script}"]\n'
                   "stop = { timeout = 30 }\n\n" for i in range(n))


def _backend_log(cluster) -> str:
    return "".join(p.read_text() for p in sorted(Path(cluster.layout.logs).glob("backend-*.log")))


def test_stopping_many_slow_apps_keeps_the_owner_link(cluster):
    cluster.up(_slow_stoppers(APPS))
    cluster.wait_ready(APPS)
    before = cluster.status()["owner_link"]
    res = cluster.cli("stop", "slow", check=True)
    assert res.code == 0, res
    apps = cluster.apps()
    assert {a["state"] for a in apps.values()} == {"stopped"}, apps
    log = _backend_log(cluster)
    assert "stop not confirmed" not in log and "connection lost" not in log, log[-3000:]
    after = cluster.status()["owner_link"]           # never broken meanwhile
    assert (after["state"], after["since"]) == ("connected", before["since"]), (before, after)
    assert cluster.down().ok and cluster.leftovers() == []
