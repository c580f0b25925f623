"""``metrics.read`` through the real owner: figures of a launch and its children."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from owner.testing import GuardianKey
from protocol.errors import BadRequest
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
        # only the launches asked for (one named twice, one unknown): inspect of one app
        only = c.call("metrics.read", {"launch_keys": ["m2", "m2", "nosuch"]})["launches"]
        assert [r["launch_key"] for r in only] == ["m2"] and only[0]["pid"] == idle["pid"]
        assert c.call("metrics.read", {"launch_keys": []})["launches"] == []
        # a status line's CPU and memory alone: the same figures, nothing else read
        usage = {r["launch_key"]: r for r in c.call(
            "metrics.read", {"usage_only": True})["launches"]}["m1"]
        assert usage["cpu_seconds"] >= m1b["cpu_seconds"] and usage["memory_bytes"] > 0
        assert usage["io_read_bytes"] is None and usage["pids"] is None
        with pytest.raises(BadRequest):
            c.call("metrics.read", {"launch_keys": [1]})
        c.call("stop", {"launch_key": "m1"}, epoch=epoch)
        left = [r["launch_key"] for r in c.call("metrics.read")["launches"]]
        assert left == ["m2"]
        assert read_stat(busy["pid"]) is None or read_stat(busy["pid"]).zombie
        c.call("stop", {"launch_key": "m2"}, epoch=epoch)
    finally:
        c.close()


LISTEN = ("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
          " print(s.getsockname()[1], flush=True); time.sleep(1000)")


def test_log_counts_journal_size_and_the_socket_inodes_of_a_launch(owner):
    """``logs`` counts what the journal committed per app; ``launch.sockets`` names the
    listening socket of a child that left the leader's session (tracked by the owner)."""
    c = owner.client()
    try:
        epoch = GuardianKey().bootstrap(c, owner.instance)
        caps = c.call("status")["capabilities"]
        assert caps["logCounts"] == 1 and caps["socketInodes"] == 1
        _launch(c, epoch, 1, ["sh", "-c", "printf 'one\\ntwo\\nthree\\n'; exec sleep 1000"])
        _launch(c, epoch, 2, ["sh", "-c", f"setsid python3 -c \"{LISTEN}\" & wait"])
        deadline = time.monotonic() + 10
        while True:
            got = c.call("metrics.read")
            logs = {(r["stack"], r["app"]): r for r in got["logs"]}
            if logs.get(("s", "a"), {}).get("lines", 0) >= 4:
                break
            assert time.monotonic() < deadline, repr(got["logs"])
            time.sleep(0.05)
        # three lines of m1 (14 bytes, newlines not counted) and the port line of m2
        assert logs[("s", "a")]["lines"] == 4 and logs[("s", "a")]["bytes"] >= 11
        assert got["journal_bytes"] > 0
        port = int(c.call("logs.read", {"stack": "s", "app": "a", "instance": 2}
                          )["records"][0]["data"])
        listening = _listening_inode(port)
        while listening not in c.call("launch.sockets", {"launch_key": "m2"})["inodes"]:
            assert time.monotonic() < deadline + 10, "the owner never saw the listener"
            time.sleep(0.1)
        assert listening not in c.call("launch.sockets", {"launch_key": "m1"})["inodes"]
        for key in ("m1", "m2"):
            c.call("stop", {"launch_key": key}, epoch=epoch)
    finally:
        c.close()


def _listening_inode(port: int) -> int:
    from backend.probes import listening_inodes
    (inode,) = listening_inodes(port)
    return inode


def test_a_usage_measurement_is_reused_once_per_other_client(owner):
    """owner.metrics.UsageMemo through the real owner: a second connection within
    USAGE_REUSE_S gets the measurement the first one got; a client asking again, a full
    read or a launch the measurement did not cover is measured anew."""
    a, b, c = owner.client(), owner.client(), owner.client()
    try:
        epoch = GuardianKey().bootstrap(a, owner.instance)
        _launch(a, epoch, 1, ["sleep", "1000"])
        usage = {"usage_only": True}
        first = a.call("metrics.read", usage)
        again = b.call("metrics.read", usage)
        assert again["at"] == first["at"] and again["launches"] == first["launches"]
        assert b.call("metrics.read", usage)["at"] > first["at"]   # b has had that one
        assert a.call("metrics.read")["at"] > first["at"]          # full: always measured
        _launch(a, epoch, 2, ["sleep", "1000"])
        both = c.call("metrics.read", usage)                         # m2 was not measured
        assert sorted(r["launch_key"] for r in both["launches"]) == ["m1", "m2"]
        # measured, not left unknown: a process that has just exec'd may have no
        # resident page counted yet, so 0 bytes is a true figure
        assert all(r["memory_bytes"] is not None for r in both["launches"])
        for key in ("m1", "m2"):
            a.call("stop", {"launch_key": key}, epoch=epoch)
    finally:
        for cl in (a, b, c):
            cl.close()
