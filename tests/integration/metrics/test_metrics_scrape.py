"""Prometheus metrics of a real tenure: a scrape over HTTP is valid exposition (checked
by ``promtool check metrics``), agrees with the owner's measurements, and a counter
survives ``tenure backend upgrade`` (a new generation re-binds the port)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "guardian"))
from test_handoff_support import derive_release, install

from backend.testing import default_sigint, free_port

# the leader forks a child: the owner's figures cover both, /proc of the leader would not
CONFIG = """
[metrics]
listen = "127.0.0.1:{port}"

[stacks.m.apps.pair]
command = ["sh", "-c", "echo started; sleep 1000 & sleep 1000; wait"]
"""
LABELS = {"stack": "m", "app": "pair", "instance": "0"}


def scrape(port: int, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return str(r.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def samples(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(text: str, name: str, **extra: str) -> float:
    return samples(text)[name][tuple(sorted({**LABELS, **extra}.items()))]


def promtool_check(text: str) -> None:
    tool = shutil.which("promtool")
    if tool is None:
        reason = "promtool (Debian package prometheus) is not installed"
        assert os.environ.get("TENURE_BENCH_PEERS") != "required", reason
        print(f"exposition not checked by promtool: {reason}")
        return
    res = subprocess.run([tool, "check", "metrics"], input=text.encode(),
                         capture_output=True, timeout=30)
    assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()


def top_checks(cluster) -> None:
    """``tenure top``: one JSON snapshot, one text snapshot, and piped snapshots one
    after the other until Ctrl-C (exit 0)."""
    snap = cluster.cli("top", "--every", "0.2", check=True).out
    assert [a["key"] for a in snap["apps"]] == ["m/pair/0"] and snap["apps"][0]["rss"] > 0
    assert snap["instances"] == snap["running"] == 1
    text = cluster.cli_text("top", "--once", "--sort", "name", "-n", "1", "--every", "0.2")
    assert text.splitlines()[1].split() == ["INSTANCE", "STATE", "CPU", "MEM", "RESTARTS",
                                            "UPTIME", "PID"]
    assert text.splitlines()[2].startswith("m/pair/0")
    # -X faulthandler: should it not end after Ctrl-C, SIGABRT makes it print where it is
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "backend.cli.main",
                             "--home", str(cluster.home), "top", "--every", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **cluster.env}, preexec_fn=default_sigint)
    try:
        assert proc.stdout is not None
        frames, deadline = 0, time.monotonic() + 30
        while frames < 2:
            assert time.monotonic() < deadline, "no second snapshot in 30 s"
            frames += "instances," in proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(10) == 0
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"tenure top did not end after SIGINT; where it was:\n"
                                 f"{err[-4000:]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def memory_agrees(cluster, port: int, pid: int) -> bool:
    """Whether the scrape's and status's memory of m/pair/0 are the owner's, within a
    few pages."""
    text = scrape(port)
    with cluster.owner() as o:
        mine = next(r for r in o.call("metrics.read")["launches"] if r["pid"] == pid)
    return abs(value(text, "tenure_app_memory_bytes") - mine["memory_bytes"]) < 256 * 1024 \
        and abs(cluster.apps()["m/pair/0"]["rss"] - mine["memory_bytes"]) < 256 * 1024


def test_scrape_is_valid_matches_the_owner_and_survives_an_upgrade(cluster, tmp_path):
    port = free_port()
    cluster.up(CONFIG.format(port=port))
    cluster.wait_ready(1)
    pid = cluster.apps()["m/pair/0"]["pid"]
    cluster.wait(lambda: value(scrape(port), "tenure_app_pids") == 3, 10, "3 processes")
    text = scrape(port)
    promtool_check(text)
    with cluster.owner() as o:
        mine = next(r for r in o.call("metrics.read")["launches"] if r["pid"] == pid)
        epoch = o.call("status")["epoch"]
    assert value(text, "tenure_app_up") == 1 and value(text, "tenure_app_pids") == 3
    assert value(text, "tenure_app_state", state="ready") == 1
    assert value(text, "tenure_app_ready") == 1
    assert value(text, "tenure_app_state", state="failed") == 0
    assert value(text, "tenure_app_start_time_seconds") == mine["started_at"]
    assert samples(text)["tenure_epoch"][()] == epoch
    assert samples(text)["tenure_owner_connected"][()] == 1
    # idle sleepers: once each has exec'd (a child of sh counted before its exec is a
    # copy of sh, megabytes apart), memory moves by a few pages at most between two
    # measurements; status shows the owner's figure for the whole app, not the leader's
    cluster.wait(lambda: memory_agrees(cluster, port, pid), 20,
                 "the scrape, status and the owner agreeing on the app's memory")

    top_checks(cluster)
    cli = cluster.cli("metrics", check=True).out
    row = next(a for a in cli["apps"] if a["key"] == "m/pair/0")
    assert row["pids"] == 3 and cli["listener"]["bound"] and cli["epoch"] == epoch

    cluster.cli("restart", "m/pair", check=True)
    text = scrape(port)
    assert value(text, "tenure_app_restarts_total") == 1
    assert value(text, "tenure_app_exits_total", reason="requested") == 1
    assert value(text, "tenure_app_exits_total", reason="failure") == 0
    app = (("app", "pair"), ("stack", "m"))
    cluster.wait(lambda: samples(scrape(port))["tenure_app_log_lines_total"][app] == 2, 10,
                 "two 'started' lines journalled")
    text = scrape(port)
    assert samples(text)["tenure_app_log_bytes_total"][app] == 2 * len("started")
    # nothing dropped is a known 0 (the family had no sample at all)
    assert samples(text)["tenure_app_log_lines_dropped_total"][app] == 0
    assert "\nlog lines dropped: 0\n" in cluster.cli_text("metrics")
    assert samples(text)["tenure_journal_bytes"][()] > 0
    rpc = samples(text)["tenure_rpc_request_duration_seconds_count"]
    assert rpc[(("method", "status"),)] >= 1 and rpc[(("method", "restart"),)] == 1
    owner_calls = samples(text)["tenure_owner_call_duration_seconds_count"]
    assert owner_calls[(("method", "stop"),)] >= 1
    assert samples(text)["tenure_handoffs_total"][(("outcome", "success"),)] == 0

    candidate = tmp_path / "candidate"
    derive_release(cluster.release, candidate,
                   {"backend/__init__.py": lambda t: t + "\n# metrics candidate\n"})
    new = install(cluster, candidate)
    with cluster.guardian() as g:
        act = g.call("upgrade", {"release": new})["activation"]
    assert act["outcome"] == "success", act
    after = scrape(port)
    promtool_check(after)
    assert samples(after)["tenure_epoch"][()] == epoch + 1
    assert value(after, "tenure_app_restarts_total") == 1  # carried, never reset
    assert value(after, "tenure_app_exits_total", reason="requested") == 1
    handoffs = samples(after)["tenure_handoffs_total"]
    assert handoffs[(("outcome", "success"),)] == 1, handoffs
    pause = samples(after)
    assert pause["tenure_handoff_pause_seconds_count"][()] == 1
    assert 0 < pause["tenure_handoff_pause_seconds_sum"][()] < 30
    assert value(after, "tenure_app_up") == 1
