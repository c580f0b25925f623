"""The journal lines of an app taken out of the config go once its newest line is
`[retention] removed_app_logs_days` old (a retention round: `tenure backend prune` runs
one now), and no sooner; a configured app's lines and its process are never touched.
Was: an app taken out kept its lines within its budget for ever, so an app renamed at
every deploy left its budget behind each time. Real daemons, the real command line."""

from __future__ import annotations

from typing import Any

APPS = """
[stacks.s.apps.kept]
command = ["sh", "-c", "echo hello from kept; exec sleep 100000"]
"""
GONE = """
[stacks.s.apps.gone]
command = ["sh", "-c", "echo hello from gone; exec sleep 100000"]
"""


def _policy(days: int) -> str:
    return f"[retention]\nremoved_app_logs_days = {days}\n"


def _lines(cluster: Any, app: str) -> list[bytes]:
    with cluster.owner() as c:
        return [r["data"] for r in c.call("logs.read", {"stack": "s", "app": app})["records"]]


def test_a_removed_apps_lines_go_once_old_enough(cluster: Any) -> None:
    cluster.up(_policy(7) + APPS + GONE)
    cluster.wait_ready(2)
    for app in ("kept", "gone"):
        cluster.wait(lambda app=app: f"hello from {app}".encode() in _lines(cluster, app),
                     30, f"the line of {app}")
    kept = cluster.apps()["s/kept/0"]["pid"]

    cluster.up(_policy(7) + APPS)                      # gone is taken out: its lines stay
    cluster.wait(lambda: "s/gone/0" not in cluster.apps(), 30, "s/gone removed")
    first = cluster.cli("backend", "prune", check=True).out
    assert (first["deleted"]["log_apps"], first["deleted"]["log_lines"]) == (0, 0), first
    assert _lines(cluster, "gone") == [b"hello from gone"]

    cluster.up(_policy(0) + APPS)                      # now old enough
    text = cluster.cli_text("backend", "prune")
    assert "the journal lines of 1 removed app (1 line)" in text, text
    assert "a removed app's lines 0 days" in text, text
    assert _lines(cluster, "gone") == []
    assert _lines(cluster, "kept") == [b"hello from kept"]
    assert cluster.apps()["s/kept/0"]["pid"] == kept
    again = cluster.cli("backend", "prune", check=True).out
    assert again["deleted"]["log_apps"] == 0
