"""Everyday CLI on the demo stack: `tenure logs demo/worker -n 3` gives the last 3 lines,
`tenure inspect` the definition and live state, `tenure restart` of one app gives it a new
pid and leaves the others alone."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from backend.testing import free_port

DEMO = (Path(__file__).resolve().parents[3] / "examples" / "demo.toml").read_text()


def demo_on_free_port() -> str:
    assert DEMO.count("8765") >= 3  # the server, its tcp readiness, its health url
    return DEMO.replace("8765", str(free_port()))


def worker_numbers(cluster: Any, generation: int) -> list[int]:
    recs = cluster.call("logs", {"stack": "demo", "app": "worker", "limit": 10000})["records"]
    return [int(re.fullmatch(rb"worker line (\d+)\n?", r["data"]).group(1))  # type: ignore
            for r in recs if r["generation"] == generation]


def cli_lines(res: Any) -> list[dict[str, Any]]:
    text = res.out if isinstance(res.out, str) else json.dumps(res.out)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_logs_inspect_and_restart_on_the_demo(cluster):
    cluster.up(demo_on_free_port())
    before = cluster.wait_ready(3)
    cluster.wait(lambda: len(worker_numbers(cluster, 1)) >= 4, 15, "4 worker lines")

    seen = max(worker_numbers(cluster, 1))
    res = cluster.cli("logs", "demo/worker", "-n", "3")
    assert res.ok, res
    recs = cli_lines(res)
    assert len(recs) == 3, recs
    assert all((r["stack"], r["app"], r["instance"]) == ("demo", "worker", 0) for r in recs)
    nums = [int(re.fullmatch(r"worker line (\d+)\n?", r["data"]).group(1))  # type: ignore
            for r in recs]
    assert nums == [nums[0], nums[0] + 1, nums[0] + 2], nums
    assert nums[-1] >= seen  # the last lines, not the first
    assert [r["id"] for r in recs] == sorted(r["id"] for r in recs)

    ins = cluster.cli("inspect", "demo/worker", check=True).out["instances"]
    assert len(ins) == 1
    w = ins[0]
    assert w["key"] == "demo/worker/0" and w["state"] == "ready"
    assert w["pid"] == before["demo/worker/0"]["pid"]
    assert w["command"][:2] == ["sh", "-c"] and "worker line" in w["command"][2]
    assert w["restart"] == "always" and w["ready_kind"] == "none"
    assert w["stop"]["signal"] == "TERM" and w["stop"]["timeout"] == 5
    assert w["launch_key"] == "demo/worker/0/1"
    web = cluster.cli("inspect", "demo/web", check=True).out["instances"][0]
    assert web["ready_kind"] == "tcp"
    missing = cluster.cli("inspect", "demo/nope")
    assert missing.code == 1 and missing.out["error"]["code"] == "NOT_FOUND", missing

    res = cluster.cli("restart", "demo/worker", check=True)
    assert res.out["instances"] == {"demo/worker/0": "ready"}, res.out
    after = cluster.apps()
    assert after["demo/worker/0"]["pid"] != before["demo/worker/0"]["pid"]
    assert after["demo/worker/0"]["ready"] and after["demo/worker/0"]["restarts"] == 1
    for other in ("demo/web/0", "demo/notifier/0"):
        assert after[other]["pid"] == before[other]["pid"] and after[other]["restarts"] == 0
    assert all(r["ready"] for r in after.values())
    # the new process logs from 1 again
    cluster.wait(lambda: 1 in worker_numbers(cluster, 2), 10, "the new worker's first line")
