"""``metrics.read`` through the real owner: figures of a launch and its children."""

from __future__ import annotations

import os
import time
from typing import Any

from owner.testing import GuardianKey
from protocol.procfs import read_stat

# A parent that forks a busy child; both stay in the launch's process group.
BUSY = "sh -c 'while :; do :; done' & sleep 1000"


def _launch(c: Any, epoch: int, n: int, argv: list[str]) -> Any:
    return c.call("launch", {
        "launch_key": f"m{n}", "stack": "s", "app": "a", "instance": n, "generation": 1,
        "argv": argv, "env": {"PATH": os.environ["PATH"]},
        "stop": {"signal": "KILL", "timeout": 5}}, epoch=epoch)


def test_metrics_read_sums_the_launch_and_its_children(owner):
    c = owner.client()
    try:
        epoch = GuardianKey().bootstrap(c, owner.instance)
        assert c.call("status")["capabilities"]["metrics"] == 1
        busy = _launch(c, epoch, 1, ["sh", "-c", BUSY])
        idle = _launch(c, epoch, 2, ["sleep", "1000"])
        deadline = time.monotonic() + 10
        while True:
            got = {r["launch_key"]: r for r in c.call("metrics.read")["launches"]}
            if got["m1"]["pids"] >= 2 and got["m1"]["cpu_seconds"] >= 0.2:
                break
            assert time.monotonic() < deadline, repr(got["m1"])
            time.sleep(0.1)
        first = c.call("metrics.read")
        assert first["isolation"] == "process-group" and first["epoch"] == epoch
        m1 = {r["launch_key"]: r for r in first["launches"]}["m1"]
        assert m1["source"] == "proc" and m1["pid"] == busy["pid"]
        assert m1["memory_bytes"] > 0 and m1["memory_peak_bytes"] >= m1["memory_bytes"]
        assert m1["io_read_bytes"] is not None and m1["oom_kills"] is None
        m2 = {r["launch_key"]: r for r in first["launches"]}["m2"]
        assert m2["pids"] == 1 and m2["pid"] == idle["pid"] and m2["cpu_seconds"] < 0.2
        time.sleep(0.3)
        second = c.call("metrics.read")
        m1b = {r["launch_key"]: r for r in second["launches"]}["m1"]
        rate = (m1b["cpu_seconds"] - m1["cpu_seconds"]) / (second["at"] - first["at"])
        assert 0.3 < rate <= 1.2  # one busy child: about one core
        c.call("stop", {"launch_key": "m1"}, epoch=epoch)
        left = [r["launch_key"] for r in c.call("metrics.read")["launches"]]
        assert left == ["m2"]
        assert read_stat(busy["pid"]) is None or read_stat(busy["pid"]).zombie
        c.call("stop", {"launch_key": "m2"}, epoch=epoch)
    finally:
        c.close()
