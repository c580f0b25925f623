"""Jobs under faults, with real processes: the backend SIGKILLed at each step of a job's
life (TENURE_JOB_FAULT, backend/jobs/faults.py) and while a job runs, the guardian
SIGKILLed at each step, while a job runs and mid-handoff, and a hot handoff while jobs
run and wait. Every job writes one line to a file when its process starts,
so "started twice" is counted from what really ran: no job may start twice, none may be
lost, and a start nobody can prove is ``recovery_required`` until resolved."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from backend.cli import render
from backend.testing import Cluster
from protocol.errors import TenureError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "guardian"))
from test_handoff_support import HandGuardian, stop_cluster_guardian


def config(home: Path, seconds: float, code: int = 0, extra: str = "") -> str:
    line = f"echo $TENURE_JOB_ID $TENURE_JOB_ATTEMPT $$ >> {home}/starts; sleep {seconds}"
    return (f'[stacks.s.jobs.j]\ncommand = ["/bin/sh", "-c", "{line}; exit {code}"]\n'
            f"{extra}")


def starts(home: Path) -> Counter[int]:
    """How many processes each job id started (from the lines they wrote)."""
    path = home / "starts"
    if not path.exists():
        return Counter()
    return Counter(int(line.split()[0]) for line in path.read_text().splitlines())


def record(cluster: Cluster, job_id: int) -> dict[str, Any]:
    return cluster.call("job.show", {"id": job_id})


def settled(cluster: Cluster, job_id: int, timeout: float = 60) -> dict[str, Any]:
    """The record once nothing drives it any more (ended or recovery_required), through
    any backend restarts on the way (a blocked recovery is forced as an operator does)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            rec = record(cluster, job_id)
            if rec["state"] not in ("admitted", "starting", "running"):
                return rec
        except Exception:
            unblock(cluster)
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not settle in {timeout} s")


def unblock(cluster: Cluster) -> None:
    """A recovery the certificate did not cover: review it and perform exactly that."""
    st = cluster.cli("backend", "status").out
    if isinstance(st, dict) and st.get("blocked"):
        plan = cluster.cli("backend", "recover", "--dry-run", check=True).out
        cluster.cli("backend", "recover", "--digest", plan["digest"])


def restored(cluster: Cluster, dead: int, timeout: float = 60) -> int:
    """Wait for a generation other than ``dead`` to answer; returns its pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid = cluster.backend_pid()
            if pid != dead:
                return pid
        except Exception:
            unblock(cluster)
        time.sleep(0.1)
    raise AssertionError("no backend was restored")


def wait_dead(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} still alive")


def up_with_fault(cluster: Cluster, fault: str, text: str) -> int:
    cluster.env["TENURE_JOB_FAULT"] = fault
    cluster.up(text)
    return cluster.backend_pid()


def test_killed_after_admission_before_the_answer_the_keyed_retry_finds_the_record(
        cluster):
    dead = up_with_fault(cluster, "admitted:1:0", config(cluster.home, 0.2))
    res = cluster.cli("job", "run", "s/j", "--key", "once", "--wait", timeout=120)
    assert res.ok, res
    assert res.out["deduplicated"] is True           # the first answer was lost, not the job
    assert (res.out["job"]["id"], res.out["job"]["state"]) == (1, "succeeded")
    assert restored(cluster, dead) != dead
    assert starts(cluster.home) == {1: 1}
    assert [j["id"] for j in cluster.call("job.list", {})["jobs"]] == [1]


def test_killed_between_starting_and_the_launch_is_recovery_required_then_resolved(
        cluster):
    dead = up_with_fault(cluster, "starting:1:1", config(cluster.home, 0.2))
    job_id = cluster.call("job.run", {"template": "s/j"})["job"]["id"]
    wait_dead(dead)
    rec = settled(cluster, job_id)
    assert rec["state"] == "recovery_required", rec
    ev = rec["evidence"]
    assert ev["launch_key"] == rec["launch_key"] and ev["live"] is None and ev["events"] == {}
    assert starts(cluster.home) == {}                # it never ran, and nothing replayed it
    status = cluster.call("status")
    assert status["jobs"]["recovery_required"] == 1
    assert "jobs: 1 recovery_required" in render.status(status)
    time.sleep(1.5)                                  # a few runner ticks: still nothing
    assert starts(cluster.home) == {} and record(cluster, job_id)["state"] == \
        "recovery_required"

    withdrawn = cluster.cli("job", "withdraw", str(job_id))
    assert withdrawn.code == 1 and "resolve" in withdrawn.out["error"]["msg"]
    res = cluster.cli("job", "resolve", str(job_id), "--not-started", "--note",
                      "the owner shows no launch", check=True).out
    assert res["state"] == "admitted" and res["resolution"]["started"] is False
    rec = settled(cluster, job_id)
    assert (rec["state"], rec["attempt"]) == ("succeeded", 2)
    assert rec["launch_key"].endswith(":2") and rec["launch_key"] != ev["launch_key"]
    assert starts(cluster.home) == {job_id: 1}


@pytest.mark.parametrize("seconds", [0.2, 3.0], ids=["ended-meanwhile", "still-running"])
def test_killed_after_the_launch_answer_the_start_is_proven_not_repeated(cluster, seconds):
    dead = up_with_fault(cluster, "launched:1:1", config(cluster.home, seconds))
    job_id = cluster.call("job.run", {"template": "s/j"})["job"]["id"]
    wait_dead(dead)
    rec = settled(cluster, job_id)
    assert (rec["state"], rec["attempt"], rec["exit_code"]) == ("succeeded", 1, 0), rec
    assert starts(cluster.home) == {job_id: 1}
    assert rec["history"][-1]["to"] == "succeeded"


def test_killed_as_the_exit_arrives_the_next_generation_records_that_exit(cluster):
    dead = up_with_fault(cluster, "exited:1:1", config(cluster.home, 0.5, code=3))
    job_id = cluster.call("job.run", {"template": "s/j"})["job"]["id"]
    wait_dead(dead)
    rec = settled(cluster, job_id)
    assert (rec["state"], rec["outcome"], rec["exit_code"]) == ("failed", "exit-code", 3)
    assert starts(cluster.home) == {job_id: 1}


def test_backend_sigkill_while_a_job_runs_leaves_it_running_once(cluster):
    cluster.up(config(cluster.home, 4.0))
    job_id = cluster.call("job.run", {"template": "s/j"})["job"]["id"]
    cluster.wait(lambda: record(cluster, job_id)["state"] == "running", 20, "running")
    pid = record(cluster, job_id)["pid"]
    cluster.wait(lambda: cluster.call("generation.certify")["published"], 30,
                 "a certificate vouching for the running job")
    dead = cluster.kill_backend()
    restored(cluster, dead)
    assert record(cluster, job_id)["pid"] == pid     # adopted, not started again
    rec = settled(cluster, job_id)
    assert (rec["state"], rec["pid"]) == ("succeeded", pid)
    assert starts(cluster.home) == {job_id: 1}


def test_a_job_that_exited_while_no_backend_ran_ends_at_its_exit(cluster):
    """The backend SIGKILLed with the guardian gone, while a 2 s job (timeout 5) runs;
    it exits meanwhile; a backend comes back seconds later. The record's end and
    duration are the exit's, not the takeover's, and it ran within its timeout."""
    cluster.up(config(cluster.home, 2.0, extra="timeout = 5\n"))
    job_id = cluster.call("job.run", {"template": "s/j"})["job"]["id"]
    cluster.wait(lambda: record(cluster, job_id)["state"] == "running", 20, "running")
    stop_cluster_guardian(cluster, signal.SIGKILL)
    dead = cluster.kill_backend()
    wait_dead(dead)
    time.sleep(8)                                   # the job ends 2 s in, unwatched
    cluster.up()
    rec = settled(cluster, job_id)
    assert (rec["state"], rec["outcome"]) == ("succeeded", "success"), rec
    assert 1.5 <= rec["duration"] < 4, rec
    assert rec["history"][-1]["at"] - rec["ended_at"] > 5   # recorded well after the exit
    assert starts(cluster.home) == {job_id: 1}


def test_guardian_sigkill_while_a_job_runs_changes_nothing(cluster):
    cluster.up(config(cluster.home, 2.0))
    job_id = cluster.call("job.run", {"template": "s/j"})["job"]["id"]
    cluster.wait(lambda: record(cluster, job_id)["state"] == "running", 20, "running")
    guardian = int(cluster.cli("backend", "status", check=True).out["guardian"]["pid"])
    os.kill(guardian, signal.SIGKILL)
    wait_dead(guardian)
    rec = settled(cluster, job_id)                  # the backend goes on by itself
    assert rec["state"] == "succeeded" and starts(cluster.home) == {job_id: 1}
    cluster.up()                                    # the guardian again, adopting it
    assert cluster.call("job.run", {"template": "s/j", "key": "after"})["job"]["id"] \
        == job_id + 1


def test_a_handoff_while_jobs_run_and_wait_starts_each_exactly_once(cluster):
    cluster.up(config(cluster.home, 1.5, extra="max_concurrent = 3\n"))
    ids = [cluster.call("job.run", {"template": "s/j", "key": f"k{i}"})["job"]["id"]
           for i in range(8)]
    cluster.wait(lambda: sum(1 for j in cluster.call("job.list", {})["jobs"]
                             if j["state"] == "running") == 3, 20, "three running")
    release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    up = cluster.cli("backend", "upgrade", release, timeout=300)
    assert up.ok and up.out["activation"]["phase"] == "complete", up
    again = [cluster.call("job.run", {"template": "s/j", "key": f"k{i}"}) for i in range(8)]
    assert [a["job"]["id"] for a in again] == ids and all(a["deduplicated"] for a in again)
    recs = [settled(cluster, i, timeout=120) for i in ids]
    assert [r["state"] for r in recs] == ["succeeded"] * 8
    assert starts(cluster.home) == dict.fromkeys(ids, 1)


@pytest.mark.parametrize("phase", ["draining", "checkpointed", "fenced", "started"])
def test_guardian_killed_mid_handoff_while_jobs_run_starts_each_exactly_once(cluster, phase):
    cluster.up(config(cluster.home, 1.5, extra="max_concurrent = 2\n"))
    ids = [cluster.call("job.run", {"template": "s/j", "key": f"k{i}"})["job"]["id"]
           for i in range(6)]
    cluster.wait(lambda: record(cluster, ids[0])["state"] == "running", 20, "running")
    release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    stop_cluster_guardian(cluster, signal.SIGKILL)     # its backend keeps running
    faulty = HandGuardian(cluster, fault=phase, tag=f"fault-{phase}")
    healthy: HandGuardian | None = None
    try:
        faulty.wait_ready()
        with pytest.raises(TenureError), cluster.guardian() as g:
            g.call("upgrade", {"release": release})     # the guardian dies under the call
        assert faulty.wait_killed() == -signal.SIGKILL
        healthy = HandGuardian(cluster, tag=f"after-{phase}")
        healthy.wait_ready()
        recs = [settled(cluster, i, timeout=120) for i in ids]
        assert [r["state"] for r in recs] == ["succeeded"] * 6, recs
        assert starts(cluster.home) == dict.fromkeys(ids, 1)
    finally:
        for hg in (faulty, healthy):
            if hg is not None:
                hg.stop()


def guardian_pid(cluster: Cluster) -> int:
    return int(cluster.cli("backend", "status", check=True).out["guardian"]["pid"])


def test_guardian_sigkill_at_each_step_of_a_job_starts_each_once(cluster):
    """The guardian SIGKILLed as a job is admitted, starts, is launched and exits
    (TENURE_JOB_FAULT with target guardian: the backend kills it at that point and goes
    on), each time with a new guardian started afterwards that adopts the living
    backend; then the guardian and the backend both killed between ``starting`` and the
    launch. Each job ran once, none is missing, the uncertain one waits for the
    operator. (SIGKILL while a job runs: the test above.)"""
    steps = {1: "admitted:1:0", 2: "starting:2:1", 3: "launched:3:1", 4: "exited:4:1"}
    cluster.env["TENURE_JOB_FAULT"] = ",".join(
        [f"{s}:guardian" for s in steps.values()] + ["starting:5:1:both"])
    cluster.up(config(cluster.home, 0.3))
    backend = cluster.backend_pid()
    for job_id, step in steps.items():
        guardian = guardian_pid(cluster)
        res = cluster.call("job.run", {"template": "s/j", "key": f"g{job_id}"})
        assert (res["job"]["id"], res["deduplicated"]) == (job_id, False), step
        wait_dead(guardian)
        rec = settled(cluster, job_id)
        assert (rec["state"], rec["attempt"]) == ("succeeded", 1), (step, rec)
        assert cluster.up().ok                          # a new guardian adopts it
        assert cluster.backend_pid() == backend, step   # and starts no second backend
    guardian = guardian_pid(cluster)
    job_id = cluster.call("job.run", {"template": "s/j", "key": "g5"})["job"]["id"]
    wait_dead(guardian)
    wait_dead(backend)
    assert cluster.up().ok
    assert restored(cluster, backend) != backend
    rec = settled(cluster, job_id)
    assert rec["state"] == "recovery_required" and rec["evidence"]["live"] is None, rec
    assert [j["id"] for j in cluster.call("job.list", {})["jobs"]] == [5, 4, 3, 2, 1]
    assert starts(cluster.home) == dict.fromkeys(steps, 1)     # 5 never ran
    keys = [record(cluster, i)["launch_key"] for i in range(1, 6)]
    assert len(set(keys)) == 5 and all(k.endswith(":1") for k in keys)
