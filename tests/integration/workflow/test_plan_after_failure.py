"""What an operation leaves undone is planned again: an apply that failed at its first
step committed the new config but never rolled its restart out, and the next plan
showed only the rest ('no changes' for the same file) while the app kept running the
old definition. Also a definition change to a stopped stack: the instance takes it and
stays down (the apply waited 60 s for it to be ready, then failed)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_plan_apply import app, plan_file, wait_op


def environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [p.split(b"=", 1) for p in f.read().split(b"\0") if b"=" in p]
    return {k.decode(): v.decode() for k, v in pairs}


def greeting(word: str) -> str:
    return app("s", "n", extra=f'env = {{ GREETING = "{word}" }}')


def changes(plan: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return sorted((c["action"], c["app"], c.get("reason")) for c in plan["changes"])


def apply(cluster: Any, plan: dict[str, Any]) -> dict[str, Any]:
    return wait_op(cluster, cluster.call("apply", {"plan": plan["id"]})["id"])


def test_a_restart_left_undone_by_a_failed_apply_is_planned_again(cluster):
    cluster.up(greeting("hello"))
    pid = cluster.wait_ready(1)["s/n/0"]["pid"]
    bad = greeting("bye") + app("s", "bad", "/nonexistent/prog")
    failed = apply(cluster, plan_file(cluster, bad, "bad.toml"))
    assert failed["outcome"] == "failed", failed          # at its first step: start bad
    assert environ(pid)["GREETING"] == "hello"

    again = plan_file(cluster, greeting("bye"), "bye.toml")
    assert changes(again) == [("restart", "s/n", "running an older definition"),
                              ("stop", "s/bad", None)], again
    (restart,) = [c for c in again["changes"] if c["action"] == "restart"]
    assert restart["only"] == [0]
    text = cluster.cli_text("plan", "--config", str(cluster.home / "bye.toml"))
    assert "instance 0 of 1 (running an older definition)" in text, text

    assert apply(cluster, again)["outcome"] == "success"
    new = cluster.wait_ready(1)["s/n/0"]["pid"]
    assert new != pid and environ(new)["GREETING"] == "bye"
    assert plan_file(cluster, greeting("bye"), "bye.toml")["changes"] == []


def test_a_definition_change_to_a_stopped_stack_is_taken_and_stays_down(cluster):
    cluster.up(app("s", "a"))
    cluster.wait_ready(1)
    digest = cluster.cli("stack", "stop", "s", "--dry-run", check=True).out["digest"]
    cluster.cli("stack", "stop", "s", "--digest", digest, check=True)
    op = apply(cluster, plan_file(cluster, app("s", "a", "sleep 1001"), "v2.toml"))
    assert op["outcome"] == "success", op                  # was: not settled in 60 s
    assert cluster.apps()["s/a/0"]["state"] == "stopped"
    cluster.cli("stack", "start", "s", check=True)
    pid = cluster.wait_ready(1)["s/a/0"]["pid"]
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert f.read().split(b"\0")[:2] == [b"sleep", b"1001"]
