"""Targets on every command of a real tenure: filters and globs, interleaved logs of
several targets, --since and --grep, and NOT_FOUND (exit 1) for a target naming nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import pytest

from backend.testing import default_sigint

CONFIG = """
[stacks.web.apps.api]
command = ["sh", "-c", "echo api $TENURE_INSTANCE up; exec sleep 1000"]
instances = 2
[stacks.web.apps.worker]
command = ["sh", "-c", "echo worker up; exec sleep 1000"]
[stacks.blog.apps.web]
command = ["sh", "-c", "echo blog up; exec sleep 1000"]
"""


def keys(res: Any) -> list[str]:
    return [a["key"] for a in res.out["apps"]]


def not_found(res: Any) -> list[str]:
    assert res.code == 1, res
    assert res.out["error"]["code"] == "NOT_FOUND", res.out
    return list(res.out["error"]["data"]["targets"])


@pytest.fixture
def web(cluster: Any) -> Any:
    cluster.up(CONFIG)
    cluster.wait_ready(4)
    cluster.wait(lambda: len(cluster.call("logs", {"limit": 100})["records"]) >= 4, 10,
                 "each app's first line")
    return cluster


def test_status_filters_every_command_refuses_nothing_and_globs_restart(web: Any) -> None:
    assert keys(web.cli("status", "web/api")) == ["web/api/0", "web/api/1"]
    assert keys(web.cli("status", "web/*/1", "blog")) == ["blog/web/0", "web/api/1"]
    assert keys(web.cli("status", "*/w*")) == ["blog/web/0", "web/worker/0"]
    assert len(keys(web.cli("status"))) == 4
    assert not_found(web.cli("status", "web/api", "nosuch", "web/x*")) == ["nosuch", "web/x*"]
    table = web.cli_text("status", "blog").splitlines()
    assert [ln.split()[0] for ln in table if ln.startswith(("APP", "blog", "web"))] == \
        ["APP", "blog/web/0"]

    # every command refuses a target naming nothing, says what there is, changes nothing
    for verb in ("start", "stop", "restart", "inspect", "logs", "status"):
        res = web.cli(verb, "web/nosuch")
        assert not_found(res) == ["web/nosuch"], verb
        assert res.out["error"]["msg"].endswith("; stack web has apps api, worker"), res
    for target, near in (("web/api/7", "web/api has instances 0, 1"),
                         ("webb", "the stacks are blog, web")):
        err = web.cli("restart", target).out["error"]
        assert err["msg"].endswith(f"; {near}"), err
    assert len(keys(web.cli("status"))) == 4   # nothing changed
    assert all(a["ready"] for a in web.cli("status").out["apps"])
    # a glob restarts only what it names
    before = {a["key"]: a["pid"] for a in web.cli("status").out["apps"]}
    res = web.cli("restart", "web/w*")
    assert res.code == 0, res
    assert list(res.out["instances"]) == ["web/worker/0"]
    after = {a["key"]: a["pid"] for a in web.cli("status").out["apps"]}
    assert after["web/worker/0"] != before["web/worker/0"]
    assert {k: v for k, v in after.items() if k != "web/worker/0"} == \
        {k: v for k, v in before.items() if k != "web/worker/0"}
    got = web.cli("inspect", "web/api/*")
    assert [i["key"] for i in got.out["instances"]] == ["web/api/0", "web/api/1"]


def test_logs_of_several_targets_interleave_in_order_since_and_grep(web: Any) -> None:
    got = web.call("logs", {"targets": ["web/api", "blog"], "tail": 50, "limit": 100})
    data = sorted(r["data"].decode().strip() for r in got["records"])
    assert data == ["api 0 up", "api 1 up", "blog up"]
    ids = [r["id"] for r in got["records"]]
    assert ids == sorted(ids)
    since = web.call("logs", {"targets": ["web"], "limit": 100, "since_time": 0})
    assert len(since["records"]) == 3
    # the human output, --since and --grep
    out = web.cli_text("logs", "web/api", "blog", "--since", "1h")
    assert sorted(out.splitlines()) == ["blog/web/0: blog up", "web/api/0: api 0 up",
                                        "web/api/1: api 1 up"]
    assert web.cli_text("logs", "--grep", "^api 1", "web").splitlines() == \
        ["web/api/1: api 1 up"]
    assert web.cli_text("logs", "web", "--since", "2099-01-01T00:00") == ""
    watch_redraws_until_ctrl_c(web)     # `status -w`, on the same tenure
    # shell completion's live targets
    assert web.cli_text("__complete", "targets").split() == [
        "blog", "blog/web", "blog/web/0", "web", "web/api", "web/api/0", "web/api/1",
        "web/worker", "web/worker/0"]


def watch_redraws_until_ctrl_c(web: Any) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "backend.cli.main", "--home", str(web.home), "status", "-w",
         "--every", "0.2", "web/api"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=default_sigint)
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        # it prints a snapshot every 0.2 s or exits (EOF): neither can block for long
        while sum(line.startswith("backend ") for line in seen) < 3:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    out = "".join(seen) + rest
    assert proc.returncode == 0, err
    # the last snapshot may be cut short by the Ctrl-C
    snapshots = [s for s in out.split("\n\n") if s.startswith("backend ")][:-1]
    assert len(snapshots) >= 2, out
    assert all("web/api/1" in s and "web/worker" not in s for s in snapshots), snapshots


def test_instances_are_listed_by_number(cluster: Any) -> None:
    """Was: 0, 1, 10, 11, 2, ... (string order) in status, inspect, top and the order a
    rolling restart of a glob took."""
    cluster.up('[stacks.s.apps.many]\ncommand = ["sleep", "1000"]\ninstances = 12\n')
    cluster.wait_ready(12)
    numbered = [f"s/many/{i}" for i in range(12)]
    assert keys(cluster.cli("status")) == numbered
    assert keys(cluster.cli("status", "s/many/*")) == numbered
    got = cluster.cli("inspect", "s/many")
    assert [i["key"] for i in got.out["instances"]] == numbered
    table = cluster.cli_text("top", "--once", "--sort", "name", "-n", "12").splitlines()
    assert [ln.split()[0] for ln in table if ln.startswith("s/")] == numbered
    res = cluster.cli("restart", "s/many/1*")
    assert list(res.out["instances"]) == ["s/many/1", "s/many/10", "s/many/11"], res.out
