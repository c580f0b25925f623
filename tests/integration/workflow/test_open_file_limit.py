"""A config the owner's open-file limit cannot hold is refused when it is planned, with
the owner's limit and what to raise. Was: it was applied, and the launches past the
limit failed one by one ('spawn failed: Too many open files'), each app then given up
at its start limit. The owner here is started under `ulimit -n 200` (soft and hard)."""

from __future__ import annotations

import json
import resource
import subprocess

from backend.testing import TENURE

SMALL = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n'
LARGE = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\ninstances = 60\n'


def _limited(cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """``tenure ARGS`` with RLIMIT_NOFILE 200 (the daemons it starts inherit it)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))
    return subprocess.run([*TENURE, "--home", str(cluster.home), "--json", *args],
                          capture_output=True, text=True, timeout=300, preexec_fn=limit,
                          stdin=subprocess.DEVNULL)


def test_a_config_past_the_owners_open_file_limit_is_refused_at_its_plan(cluster):
    up = _limited(cluster, "up", "--config", str(cluster.write_config(SMALL)),
                  "--release", str(cluster.release))
    assert up.returncode == 0, up.stdout + up.stderr
    with cluster.owner() as c:
        assert c.call("status")["nofile"] == 200
    large = cluster.write_config(LARGE, "large.toml")
    plan = cluster.cli("plan", "--config", str(large))
    err = (plan.out or {}).get("error", {})
    assert plan.code != 0 and err.get("code") == "CONFIG_INVALID", plan.out
    assert err["data"]["key"] == "stacks.s.apps.a.instances", err
    assert "the owner may hold 200 open files (its RLIMIT_NOFILE)" in err["msg"]
    assert len(cluster.apps()) == 1                      # nothing changed
    assert json.loads(json.dumps(cluster.status()["apps"]))[0]["state"] == "ready"
