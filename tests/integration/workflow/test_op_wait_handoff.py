"""`tenure apply PLAN --wait`, `tenure op show ID --wait` and `tenure up --config F` (of
the config that operation applies: it waits for it) live through `tenure backend upgrade`
(a full handoff of the control plane) on a real tenure: they ask the next generation for
the same operation and end with its real outcome and exit status.

Was: both ended with SHUTTING_DOWN ("server is draining; retry against the next one",
exit 1, documented as "the operation ended failed or abandoned") while the operation went
on and ended `success` under the next generation."""

from __future__ import annotations

import json
import sqlite3
import sys
from contextlib import closing
from typing import Any

PY = sys.executable


def config(version: int) -> str:
    """Three instances that take 2 s to be ready and 1 s to stop: changing ``version``
    rolls them one at a time, an apply of several seconds."""
    slow = ("import signal, sys, time\\nsignal.signal(signal.SIGTERM, lambda *a: "
            "(time.sleep(1), sys.exit(0)))\\ntime.sleep(1e9)")
    return (f'[stacks.s.apps.slow]\ncommand = ["{PY}", "-c", "{slow}"]\ninstances = 3\n'
            'ready = { kind = "delay", delay = 2 }\nstop = { timeout = 30 }\n'
            f'env = {{ VERSION = "{version}" }}\n')


def plans(cluster: Any) -> int:
    """How many plans the backend stored (read-only: `up --config` stores one just before
    it applies it)."""
    with closing(sqlite3.connect(f"file:{cluster.layout.backend_db}?mode=ro", uri=True)) as db:
        return int(db.execute("SELECT count(*) FROM plans").fetchone()[0])


def ended(proc: Any, timeout: float = 120) -> tuple[int, Any, str]:
    """Exit status, parsed --json stdout and stderr of a waiting `tenure` command."""
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, json.loads(out) if out.strip() else None, err


def test_waits_for_an_operation_end_with_its_outcome_after_a_backend_upgrade(cluster):
    cluster.up(config(1))
    cluster.wait_ready(3)
    v2 = cluster.write_config(config(2), "v2.toml")
    plan = cluster.cli("plan", "--config", str(v2), check=True).out
    assert [c["action"] for c in plan["changes"]] == ["restart"], plan
    applying = cluster.follow("--json", "apply", plan["id"], "--wait", "--timeout", "120")
    showing = upping = None
    try:
        cluster.wait(lambda: cluster.call("op.list", {"open": True})["operations"], 30,
                     "the operation admitted")
        op_id = cluster.call("op.list", {"open": True})["operations"][0]["id"]
        showing = cluster.follow("--json", "op", "show", op_id, "--wait", "--timeout", "120")
        planned = plans(cluster)
        upping = cluster.follow("--json", "up", "--timeout", "120", "--config", str(v2))
        cluster.wait(lambda: plans(cluster) > planned, 30, "up's plan of the same config")
        before = cluster.backend_pid()
        release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
        up = cluster.cli("backend", "upgrade", release, timeout=300)
        assert up.ok and up.out["activation"]["phase"] == "complete", up
        assert cluster.backend_pid() != before
        assert cluster.call("op.show", {"id": op_id})["outcome"] is None, \
            "the operation ended before the handoff: the test proves nothing"
        applied = ended(applying)
        shown = ended(showing)
        upped = ended(upping)
    finally:
        for proc in (applying, showing, upping):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
    for code, out, err in (applied, shown):
        assert code == 0, (code, out, err)
        assert out["id"] == op_id and out["outcome"] == "success", out
    code, out, err = upped
    assert code == 0 and out["apply"]["operation"]["id"] == op_id, (code, out, err)
    assert out["apply"]["operation"]["outcome"] == "success", out
