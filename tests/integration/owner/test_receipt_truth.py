"""Shutdown is reported truthfully: the receipt alone is no proof, an unclean receipt is
kept as evidence, and `tenure down` says when the owner's shutdown was not clean."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from owner.testing import GuardianKey, OwnerProcess, kill_pids

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_owner import Live  # the `owner` fixture is in this directory's conftest.py


def _wait_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 5
    while any(psutil.pid_exists(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def _crash_with_apps(owner: OwnerProcess) -> tuple[list[int], dict]:
    lv = Live(owner, GuardianKey())
    pids = [lv.launch(["sleep", "1000"])["pid"] for _ in range(2)]
    lv.c.close()
    assert owner.stop(signal.SIGKILL) == -9
    receipt = json.loads((owner.paths.dir / "owner-receipt.json").read_text())
    assert receipt["state"] == "running"
    return pids, receipt


@pytest.mark.parametrize("edit", ["clean", "deleted"])
def test_hand_edited_or_deleted_receipt_is_no_proof(owner, edit):
    pids, receipt = _crash_with_apps(owner)
    path = owner.paths.dir / "owner-receipt.json"
    try:
        if edit == "clean":
            path.write_text(json.dumps({**receipt, "state": "clean"}))
        else:
            path.unlink()
        refused = owner.run_exit("serve")
        assert refused.returncode == 3, refused.stderr
        assert "receipt is no proof" in refused.stderr and "2 launches" in refused.stderr
        assert all(psutil.pid_exists(p) for p in pids)   # nothing started beside them
        alive = owner.run_exit("reconcile", "--json")
        assert alive.returncode == 4 and "leader alive" in alive.stdout
    finally:
        kill_pids(pids)
        _wait_gone(pids)
    assert owner.run_exit("reconcile").returncode == 0
    owner.start()
    with owner.client() as c:
        assert c.call("inventory")["launches"] == []


LINGER = ["sh", "-c", "setsid sleep 1000 & echo $!; exit 0"]


def _first_line(lv: Live, instance: int) -> str:
    deadline = time.monotonic() + 10     # the journal is written behind the exit event
    while time.monotonic() < deadline:
        recs = lv.c.call("logs.read", {"instance": instance, "stream": "stdout"})["records"]
        if recs:
            return str(recs[0]["data"].decode())
        time.sleep(0.02)
    raise AssertionError(f"instance {instance} wrote nothing")


def _crash_leaving_a_lingering_child(owner: OwnerProcess) -> tuple[int, dict]:
    """A launch whose leader exited while its setsid child runs on; then SIGKILL."""
    lv = Live(owner, GuardianKey())
    r = lv.launch(LINGER)
    lv.wait_event(lambda e: e["kind"] == "exit" and e["launch_key"] == r["launch_key"])
    child = int(_first_line(lv, r["instance"]))
    assert psutil.pid_exists(child) and psutil.Process(child).status() != "zombie"
    assert lv.c.call("inventory")["launches"] == []     # nothing recorded live
    lv.c.close()
    assert owner.stop(signal.SIGKILL) == -9
    return child, json.loads((owner.paths.dir / "owner-receipt.json").read_text())


def test_lingering_child_of_an_exited_launch_makes_a_clean_receipt_no_proof(owner):
    child, receipt = _crash_leaving_a_lingering_child(owner)
    path = owner.paths.dir / "owner-receipt.json"
    try:
        path.write_text(json.dumps({**receipt, "state": "clean"}))
        refused = owner.run_exit("serve")
        assert refused.returncode == 3, refused.stderr
        assert "receipt is no proof" in refused.stderr
        assert "1 processes of ended launches still running" in refused.stderr
        alive = owner.run_exit("reconcile", "--json")
        assert alive.returncode == 4, alive.stdout
        assert json.loads(alive.stdout)["data"]["survivors"] == [
            {"launch_key": "k1", "pids": [child], "why": "descendant alive"}]
    finally:
        kill_pids([child])
        _wait_gone([child])
    assert owner.run_exit("reconcile").returncode == 0
    owner.start()


def test_unclean_receipt_is_kept_as_evidence_after_reconcile(owner):
    pids, receipt = _crash_with_apps(owner)
    kill_pids(pids)
    _wait_gone(pids)
    assert owner.run_exit("reconcile").returncode == 0
    owner.start()
    kept = owner.paths.dir / "receipts" / f"{receipt['instance']}.json"
    assert json.loads(kept.read_text())["state"] == "running"
    assert kept.stat().st_mode & 0o777 == 0o600
    assert kept.parent.stat().st_mode & 0o777 == 0o700
    current = json.loads((owner.paths.dir / "owner-receipt.json").read_text())
    assert current["instance"] == owner.instance != receipt["instance"]


def test_down_exits_nonzero_and_says_why_when_the_shutdown_was_not_clean(cluster):
    cluster.env = {"TENURE_OWNER_FAULT": "logs"}   # test-only: the logs stage fails
    cluster.up('[stacks.s.apps.a]\ncommand = ["sleep", "infinity"]\n')
    cluster.wait_ready(1)
    res = cluster.cli("down")
    assert res.code == 1, (res.out, res.stderr)
    rec = res.out["owner_receipt"]
    assert (rec["state"], rec["failed_stage"]) == ("failed", "logs")
    assert "test fault" in rec["detail"]
    cluster.env = {}
    again = cluster.cli("up")    # the unclean shutdown must be reconciled first
    assert again.code != 0
    assert "RECONCILE_REQUIRED" in again.stderr + json.dumps(again.out)
    assert cluster.cli("owner", "reconcile").code == 0
    cluster.up()
    cluster.wait_ready(1)


def test_down_renders_an_unclean_receipt_for_people():
    from backend.cli import render_changes
    text = render_changes.down({"guardian": True, "owner": True, "applications_stopped": 2,
                        "owner_receipt": {"state": "failed", "failed_stage": "processes",
                                          "detail": "processes remain: [412]"}})
    assert "owner shutdown NOT clean (failed at stage processes): processes remain" in text
    assert "tenure owner reconcile" in text
    assert render_changes.down({"guardian": True, "owner": False}).splitlines()[1] == \
        "owner: STILL RUNNING: not stopped in time; its applications still run"
