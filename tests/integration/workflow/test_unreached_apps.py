"""An apply that fails before a step leaves the apps of that step shown, not missing:
`status` lists them `stopped` with the reason `never started`, `status`/`inspect` of
them answer, and the next plan still starts them."""

from __future__ import annotations

import re
from typing import Any

CONFIG = """
[stacks.a.apps.good]
command = ["sleep", "1000"]

[stacks.a.apps.bad]
command = ["/nonexistent/tenure-test-binary"]
restart = "never"

[stacks.b.apps.other]
command = ["sleep", "1000"]
"""


def test_apps_an_apply_never_reached_are_shown_stopped_and_still_planned(cluster: Any
                                                                          ) -> None:
    up = cluster.cli("up", "--config", str(cluster.write_config(CONFIG)),
                     "--release", str(cluster.release))
    assert up.code != 0, up
    assert up.out["apply"]["operation"]["outcome"] == "failed", up.out
    rows = {r["key"]: r for r in cluster.status()["apps"]}
    assert set(rows) == {"a/good/0", "a/bad/0", "b/other/0"}, rows   # was: no b/other/0
    other = rows["b/other/0"]
    assert (other["state"], other["pid"], other["reason"]) == ("stopped", None,
                                                               "never started"), other
    assert cluster.cli("status", "b", check=True).out["apps"][0]["key"] == "b/other/0"
    assert cluster.cli("inspect", "b/other", check=True).out["instances"]
    plan = cluster.cli("plan", "--config", str(cluster.config_path), check=True).out
    assert {"action": "start", "app": "b/other", "instances": 1} in plan["changes"], plan
    human = cluster.cli_text("status")
    assert "never started" in human, human


def test_a_backing_off_instance_says_when_it_starts_again(cluster: Any) -> None:
    cluster.up('[stacks.c.apps.crash]\ncommand = ["sh", "-c", "exit 7"]\n'
               'restart = "on-failure"\nbackoff = { initial = 300, max = 300 }\n')
    cluster.wait(lambda: cluster.apps()["c/crash/0"]["state"] == "backoff", 20, "backoff")
    row = cluster.apps()["c/crash/0"]
    assert row["reason"] == "exited 7" and 240 < row["next_start_in"] <= 300, row
    text = cluster.cli_text("status", "c")
    assert re.search(r"exited 7; next start in (4m[0-5]\ds|5m00s)\n", text), text
