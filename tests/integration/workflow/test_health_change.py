"""A health check changed or removed by an applied config takes effect at once, on the
process that runs (a policy change restarts nothing): a removed check no longer
judges the app, a changed one judges it by its new settings."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

APP = """
[stacks.h.apps.web]
command = ["sleep", "infinity"]
backoff = {{ initial = 0.1, max = 0.2 }}
start_limit = {{ burst = 50, interval = 60 }}
{health}
"""
CHECK = ('health = {{ kind = "exec", command = ["test", "!", "-e", "{flag}"], '
         'interval = 0.1, timeout = 2, failures = 2 }}')


def _config(flag: Path | None) -> str:
    return APP.format(health="" if flag is None else CHECK.format(flag=flag))


def _steady(cluster: Any, seconds: float) -> dict[str, Any]:
    """The instance, after checking for ``seconds`` that it stays ready, same pid."""
    first = cluster.apps()["h/web/0"]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = cluster.apps()["h/web/0"]
        assert (now["state"], now["pid"], now["restarts"]) == (
            "ready", first["pid"], first["restarts"]), now
        time.sleep(0.1)
    return dict(first)


def test_a_removed_check_judges_no_more_and_a_changed_one_judges_at_once(
        cluster: Any) -> None:
    old, new = cluster.home / "old-sick", cluster.home / "new-sick"
    cluster.up(_config(old))
    pid = cluster.wait_ready(1)["h/web/0"]["pid"]
    cluster.up(_config(None))                       # the check removed: an update
    shown = cluster.cli("inspect", "h/web", check=True).out["instances"][0]
    assert (shown["health"], shown["cwd"], shown["readiness"]) == (None, None, "")
    old.touch()                                     # what the old check would fail on
    assert _steady(cluster, 1.5)["pid"] == pid      # was: restarted until failed
    old.unlink()

    cluster.up(_config(old))                        # a check again
    cluster.up(_config(new))                        # changed: judged by the new one
    health = cluster.cli("inspect", "h/web", check=True).out["instances"][0]["health"]
    assert health == {"check": f"exec test '!' -e {new}", "interval": 0.1, "timeout": 2.0,
                      "failures": 2, "grace": 0.0}, health
    old.touch()
    assert _steady(cluster, 1.5)["pid"] == pid      # was: restarted on the old check
    new.touch()
    cluster.wait(lambda: cluster.apps()["h/web/0"]["last_outcome"] == "health", 15,
                 "a restart by the new check")
    assert cluster.apps()["h/web/0"]["restarts"] >= 1
