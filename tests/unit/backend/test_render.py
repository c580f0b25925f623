"""Human-readable CLI output from recorded answers (no daemons)."""

from __future__ import annotations

from typing import Any

from backend.cli import render


def _status(*apps: dict[str, Any]) -> dict[str, Any]:
    return {"backend": {"activation": "a1", "epoch": 2, "pid": 10, "draining": False,
                        "config": "/c.toml"}, "intents": {},
            "apps": [{"key": f"{a['stack']}/{a['app']}/0", "state": "ready", "pid": 1,
                      "uptime": 5.0, "restarts": 0, "ready": True, "cpu_percent": 0.0,
                      "rss": 1 << 20, **a} for a in apps]}


def test_status_lists_apps_that_lost_log_lines_below_the_table():
    out = render.status(_status({"stack": "s", "app": "noisy", "log_dropped": 1834},
                                {"stack": "s", "app": "quiet", "log_dropped": 0},
                                {"stack": "t", "app": "old", "log_dropped": None}))
    assert out.splitlines()[-1] == ("log lines dropped (the owner's journal queue was "
                                    "full): s/noisy 1834")


def test_status_without_drops_has_no_such_line():
    out = render.status(_status({"stack": "s", "app": "quiet", "log_dropped": 0}))
    assert "dropped" not in out
