"""A config that declares no app and no job is refused (CONFIG_INVALID), by `plan`,
`apply` through `up --config`, and the queue of `up --no-wait`, and changes nothing.

Was: it parsed, and as a plan it stopped every application, exit 0: `tenure up --config
<(generate)` whose generator failed took everything down."""

from __future__ import annotations

import subprocess
import sys

import pytest

CONFIG = '[stacks.s.apps.a]\ncommand = ["sleep", "300"]\n' \
         '[stacks.t.apps.b]\ncommand = ["sleep", "300"]\n'
NOTHING = ["", "# nothing here yet\n", "[stacks]\n",
           '[settings]\nviewer_group = "adm"\n']


def test_a_config_that_declares_nothing_is_refused_and_stops_nothing(cluster):
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    before = cluster.pids()
    for i, text in enumerate(NOTHING):
        path = cluster.write_config(text, f"empty{i}.toml")
        for cmd in (["plan", "--config", str(path)], ["up", "--config", str(path)]):
            res = cluster.cli(*cmd)
            err = res.out["error"]
            assert res.code == 1 and err["code"] == "CONFIG_INVALID", (text, cmd, res)
            assert err["msg"] == (f"{path}: declares no app and no job: applied, it would "
                                  "stop every application (is it the file you meant, or "
                                  "did what generates it fail?); to stop them all, "
                                  "`tenure down`, or `tenure stack stop STACK` for each "
                                  "stack"), err
    # a generator that failed: the shell's pipe carries nothing
    res = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m backend.cli.main --home "{cluster.home}" '
                       '--json up --config <(exit 1)'], capture_output=True, text=True,
        timeout=120)
    assert res.returncode == 1 and "CONFIG_INVALID" in res.stdout, res
    assert cluster.pids() == before
    assert {k: a["state"] for k, a in cluster.apps().items()} == \
        {"s/a/0": "ready", "t/b/0": "ready"}


@pytest.mark.parametrize("text", ["", "[stacks]\n"])
def test_plan_without_a_backend_refuses_it_too(cluster, text):
    path = cluster.write_config(text, "empty.toml")
    res = cluster.cli("plan", "--config", str(path))
    assert res.code == 1 and res.out["error"]["code"] == "CONFIG_INVALID", res
    assert "declares no app and no job" in res.out["error"]["msg"]
