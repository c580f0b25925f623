"""`tenure up --config F` (and `apply`) run again while the operation applying F is still
open (the first `up` still waiting, or killed while it waited) waits for that operation
and ends with its outcome and exit status, naming it; `--no-wait` reports it. Once no
operation is open, the same config is `no-change` again.

Was: the second `up` printed `applied 0 changes: no-change` and exited 0 while the
operation it ran into was still running (it later failed): apply decided "nothing to do"
before it looked for an open operation applying this same config."""

from __future__ import annotations

import signal
from typing import Any

BASE = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n'
# exits before it is ready, twice: `failed` (start-limit-hit) some 6 s into the apply
BAD = BASE + ('[stacks.s.apps.bad]\ncommand = ["sh", "-c", "sleep 3; exit 1"]\n'
              'ready = { kind = "delay", delay = 5 }\n'
              'backoff = { initial = 0.05, max = 0.1 }\n'
              'start_limit = { burst = 2, interval = 60 }\n')


def up(cluster: Any, path: Any, *more: str) -> Any:
    return cluster.cli("up", "--timeout", "60", "--config", str(path), "--release",
                       str(cluster.release), *more, timeout=120)


def test_up_again_while_its_apply_runs_waits_for_that_operation(cluster):
    cluster.up(BASE)
    cluster.wait_ready(1)
    bad = cluster.write_config(BAD, "bad.toml")
    first = cluster.follow("--json", "up", "--timeout", "60", "--config", str(bad))
    try:
        cluster.wait(lambda: cluster.call("op.list", {"open": True})["operations"], 30,
                     "the first up's operation admitted")
    finally:
        first.send_signal(signal.SIGKILL)   # killed mid-apply: its operation goes on
        first.communicate(timeout=30)
    [op] = cluster.call("op.list", {"open": True})["operations"]

    left = up(cluster, bad, "--no-wait")
    assert left.ok, left
    reported = left.out["apply"]["operation"]
    assert (reported["id"], reported["outcome"], reported.get("joined")) == (op["id"], None, True)

    plan = cluster.cli("plan", "--config", str(bad), check=True).out
    applied = cluster.cli("apply", plan["id"])
    assert applied.ok and applied.out["id"] == op["id"] and applied.out.get("joined"), applied

    again = up(cluster, bad)
    assert again.code == 1, again
    waited = again.out["apply"]["operation"]
    assert (waited["id"], waited["outcome"], waited.get("joined")) == (op["id"], "failed", True)
    assert "failed to start" in waited["error"], waited
    text = cluster.cli_text("up", "--config", str(bad), expect=0)   # none open: no-change
    assert "applied 0 changes: no-change" in text, text


def test_apply_wait_of_the_same_config_waits_for_the_open_operation(cluster):
    cluster.up(BASE)
    cluster.wait_ready(1)
    bad = cluster.write_config(BAD, "bad.toml")
    first = cluster.cli("apply", cluster.cli("plan", "--config", str(bad), check=True)
                        .out["id"], check=True).out
    plan = cluster.cli("plan", "--config", str(bad), check=True).out
    text = cluster.cli_text("apply", plan["id"], "--wait", "--timeout", "60", expect=1)
    assert f"operation {first['id']} already applies this config" in text, text
    assert "failed" in text, text


def test_a_plan_made_before_the_open_operation_began_joins_it(cluster):
    """Several `tenure up --config F` at once each plan, then apply: the first admitted
    changed what runs, and the others' plans, made before, were STALE_PLAN, though the
    operation they ran into applies the very same config."""
    cluster.up(BASE)
    cluster.wait_ready(1)
    bad = cluster.write_config(BAD, "bad.toml")
    early = cluster.cli("plan", "--config", str(bad), check=True).out
    late = cluster.cli("plan", "--config", str(bad), check=True).out
    first = cluster.cli("apply", early["id"], check=True).out
    joined = cluster.cli("apply", late["id"])
    assert joined.ok and joined.out["id"] == first["id"] and joined.out.get("joined"), joined
