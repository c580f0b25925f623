"""Hot backend handoff with real processes (issue 4, "Must show"): an upgrade under 50
running apps changes nothing the apps can see; `--check` changes nothing at all; a
candidate failing preflight keeps the incumbent; a candidate crashing before READY rolls
back under a fresh epoch; a second concurrent upgrade is refused."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_handoff_support as support
from test_handoff_support import (
    PHASES,
    Candidates,
    backend_procs,
    config,
    guardian_status,
    install,
    journal_numbers,
    owner_epoch,
    refused_code,
)

candidates = support.candidates  # the session fixture of derived releases


def _selector(cluster: Any) -> dict[str, Any]:
    sel: dict[str, Any] = cluster.cli("backend", "status", check=True).out["selector"]
    return sel


def _upgrade(cluster: Any, release: str, check: bool = False) -> dict[str, Any]:
    with cluster.guardian() as g:
        r: dict[str, Any] = g.call("upgrade", {"release": release, "check": check})
        return r


def test_upgrade_under_50_apps_keeps_pids_logs_and_fences_the_incumbent(cluster, candidates):
    cluster.up(config(sleepers=50, counter=True))
    cluster.wait_ready(51)
    new = install(cluster, candidates.good)
    sel = _selector(cluster)
    assert sel["current"] != new
    before = cluster.pids()
    assert len(before) == 51
    old_epoch = owner_epoch(cluster)
    old_backend = cluster.status()["backend"]
    assert old_backend["epoch"] == old_epoch
    time.sleep(0.3)  # some numbered lines before the handoff
    lines_before = len(journal_numbers(cluster))
    assert lines_before > 0

    res = _upgrade(cluster, new)

    act = res["activation"]
    assert (act["phase"], act["outcome"], act["code"]) == ("complete", "success", None), res
    assert [r["phase"] for r in res["receipts"]] == PHASES
    assert act["from_epoch"] == old_epoch and act["epoch"] == old_epoch + 1
    assert owner_epoch(cluster) == old_epoch + 1
    st = cluster.status()["backend"]
    assert st["epoch"] == old_epoch + 1 and st["release"] == new
    assert st["pid"] != old_backend["pid"]
    assert _selector(cluster)["current"] == new and _selector(cluster)["previous"] == \
        sel["current"]
    assert cluster.pids() == before                  # every pid and start tick
    assert len(backend_procs(cluster.home)) == 1
    # the incumbent's epoch is refused by the owner for every mutation
    with cluster.owner() as o:
        assert refused_code(lambda: o.call("launch", {
            "launch_key": "stale-epoch-probe", "stack": "load", "app": "sleeper",
            "instance": 99, "generation": 1, "argv": ["true"]}, epoch=old_epoch)) == \
            "STALE_EPOCH"
        rev = o.call("stack.intents")["intents"].get("load", {}).get("revision", 0)
        assert refused_code(lambda: o.call("stack.set_intent", {
            "stack": "load", "intent": "stopped", "expected_revision": rev},
            epoch=old_epoch)) == "STALE_EPOCH"
        assert refused_code(lambda: o.call("observations.ack", {"cursor": 0},
                                           epoch=old_epoch)) == "STALE_EPOCH"
    assert cluster.pids() == before
    # the numbered writer: no gap, no duplicate across the handoff
    time.sleep(0.5)
    nums = journal_numbers(cluster)
    assert len(nums) > lines_before + 20
    assert nums == list(range(nums[0], nums[0] + len(nums))), _first_break(nums)
    assert nums[0] == 0


def _first_break(nums: list[int]) -> str:
    for a, b in itertools.pairwise(nums):
        if b != a + 1:
            return f"{a} followed by {b}"
    return "none"


def test_check_only_changes_nothing(cluster, candidates: Candidates):
    cluster.up(config(sleepers=3))
    cluster.wait_ready(3)
    new = install(cluster, candidates.good)
    before = (cluster.pids(), owner_epoch(cluster), _selector(cluster), cluster.backend_pid())

    res = cluster.cli("backend", "upgrade", new, "--check")

    assert res.code == 0, res
    act = res.out["activation"]
    assert (act["phase"], act["outcome"]) == ("complete", "check-only")
    assert [r["phase"] for r in res.out["receipts"]] == ["created", "checked", "complete"]
    assert res.out["receipts"][1]["detail"]["preflight"]["exit_status"] == 0
    assert act["epoch"] is None
    after = (cluster.pids(), owner_epoch(cluster), _selector(cluster), cluster.backend_pid())
    assert after == before
    assert cluster.status()["backend"]["draining"] is False


def test_candidate_failing_preflight_keeps_the_incumbent_serving(cluster, candidates):
    cluster.up(config(sleepers=3))
    cluster.wait_ready(3)
    bad = install(cluster, candidates.preflight_fails)
    before = (cluster.pids(), owner_epoch(cluster), _selector(cluster), cluster.backend_pid())

    res = cluster.cli("backend", "upgrade", bad)

    assert res.code != 0
    act = res.out["activation"]
    assert act["phase"] == "aborted" and act["code"] == "BACKEND_PREFLIGHT_FAILED", act
    assert [r["phase"] for r in res.out["receipts"]] == ["created", "aborted"]
    st = cluster.status()                          # the incumbent still answers
    assert st["backend"]["draining"] is False
    after = (cluster.pids(), owner_epoch(cluster), _selector(cluster), cluster.backend_pid())
    assert after == before
    assert len(backend_procs(cluster.home)) == 1
    # and it still serves mutations: a plan/apply round trip
    assert cluster.up(config(sleepers=3)).out["apply"]["plan"]["changes"] == []


def test_preflight_failure_receipt_keeps_exit_status_elapsed_and_stderr(cluster, candidates):
    cluster.up(config(sleepers=1))
    bad = install(cluster, candidates.preflight_fails)
    res = cluster.cli("backend", "upgrade", bad).out
    detail = res["receipts"][-1]["detail"]
    assert detail.get("exit_status") == 3
    assert "elapsed" in detail
    assert "candidate refuses to run" in detail.get("stderr", "")


def test_candidate_crashing_before_ready_rolls_back_under_a_fresh_epoch(cluster, candidates):
    cluster.up(config(sleepers=3))
    cluster.wait_ready(3)
    crash = install(cluster, candidates.crashes)
    sel = _selector(cluster)
    pids, epoch = cluster.pids(), owner_epoch(cluster)

    res = cluster.cli("backend", "upgrade", crash)

    assert res.code != 0
    act = res.out["activation"]
    assert (act["phase"], act["outcome"]) == ("rolled_back", "rolled-back"), act
    assert act["epoch"] == epoch + 1
    phases = [r["phase"] for r in res.out["receipts"]]
    assert phases == [*PHASES[:7], "rolled_back"]   # failed in `started`
    recent = guardian_status(cluster)["recent"]
    rollback = [a for a in recent if a["kind"] == "restore"]
    assert rollback and rollback[0]["phase"] == "complete", recent
    assert rollback[0]["release"] == sel["current"] and rollback[0]["epoch"] == epoch + 2
    assert owner_epoch(cluster) == epoch + 2
    st = cluster.status()["backend"]
    assert st["epoch"] == epoch + 2 and st["release"] == sel["current"]
    assert _selector(cluster)["current"] == sel["current"]
    assert cluster.pids() == pids                   # apps untouched
    assert len(backend_procs(cluster.home)) == 1


def test_second_concurrent_upgrade_is_refused(cluster, candidates):
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    new = install(cluster, candidates.good)
    first: dict[str, Any] = {}

    def run() -> None:
        try:
            first["res"] = _upgrade(cluster, new)
        except Exception as exc:  # reported below
            first["exc"] = exc

    t = threading.Thread(target=run)
    t.start()
    try:
        cluster.wait(lambda: guardian_status(cluster)["handoff_in_progress"], 30,
                     "the first upgrade running")
        with cluster.guardian() as g:
            code = refused_code(lambda: g.call("upgrade", {"release": new}))
        cli = cluster.cli("backend", "upgrade", new)
    finally:
        t.join(120)
    assert code == "OPERATION_IN_PROGRESS"
    assert cli.code != 0 and "OPERATION_IN_PROGRESS" in (cli.stderr + str(cli.out))
    assert "exc" not in first, first
    assert first["res"]["activation"]["phase"] == "complete"
    # refused means refused: exactly one upgrade activation exists
    kinds = [a["kind"] for a in guardian_status(cluster)["recent"]]
    assert kinds.count("upgrade") == 1, kinds
    assert len(backend_procs(cluster.home)) == 1
