"""What a plan shows besides its apps' changes: a settings change (it said 'no changes'
and the apply then moved the metrics listener), and that a stack it changes is stopped
(it said 'start', and nothing started). A stack removed from the config while stopped
can be started again, which clears its stopped intent (it was NOT_FOUND, for good)."""

from __future__ import annotations

import socket
from typing import Any

APP = '[stacks.{stack}.apps.a]\ncommand = ["sleep", "100000"]\n'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plan(cluster: Any, text: str) -> dict[str, Any]:
    path = cluster.write_config(text, "next.toml")
    return dict(cluster.cli("plan", "--config", str(path), check=True).out)


def test_a_settings_change_is_in_the_plan(cluster):
    one, two = free_port(), free_port()
    base = APP.format(stack="s")
    cluster.up(f'[metrics]\nlisten = "127.0.0.1:{one}"\n' + base)
    cluster.wait_ready(1)
    p = plan(cluster, f'[metrics]\nlisten = "127.0.0.1:{two}"\n' + base)
    assert p["changes"] == [] and p["settings"] == [
        {"setting": "metrics.listen", "from": f"127.0.0.1:{one}",
         "to": f"127.0.0.1:{two}"}], p
    text = cluster.cli_text("plan", "--config", str(cluster.home / "next.toml"))
    assert "no changes" not in text and "metrics.listen" in text, text


def test_a_stopped_stack_is_named_and_can_be_started_once_removed(cluster):
    cluster.up(APP.format(stack="s") + APP.format(stack="e"))
    cluster.wait_ready(2)
    digest = cluster.cli("stack", "stop", "e", "--dry-run", check=True).out["digest"]
    cluster.cli("stack", "stop", "e", "--digest", digest, check=True)
    without = cluster.write_config(APP.format(stack="s"), "without.toml")
    cluster.cli("up", "--config", str(without), check=True)
    back = plan(cluster, APP.format(stack="s") + APP.format(stack="e"))
    assert [(c["action"], c["app"]) for c in back["changes"]] == [("start", "e/a")], back
    assert back["stopped_stacks"] == ["e"], back
    text = cluster.cli_text("plan", "--config", str(cluster.home / "next.toml"))
    assert "stack e is stopped: its apps are recorded, not started" in text, text
    started = cluster.cli("stack", "start", "e")        # not in the config: clears it
    assert started.code == 0 and started.out["intent"] == "running", started
    assert "e" not in (cluster.status().get("intents") or {}) or \
        cluster.status()["intents"]["e"]["intent"] == "running"
