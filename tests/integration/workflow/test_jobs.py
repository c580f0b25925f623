"""Jobs through the real path (owner, guardian, backend, CLI): a submission is one
record per key, 20 clients submitting one key at once make one record, a key reused for
other arguments is a CONFLICT naming the record; output lands in the journal; a job
waits for its `after` apps and for max_concurrent; withdraw, stop and timeout end
records as they should."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from protocol.errors import Conflict, TenureError

PY = sys.executable


def job(name: str, code: str, extra: str = "") -> str:
    return (f'\n[stacks.j.jobs.{name}]\ncommand = ["{PY}", "-c", \'{code}\']\n{extra}')


ECHO = "import os, sys; print(\"hello\", os.environ[\"TENURE_JOB_ID\"], *sys.argv[1:]); " \
       "print(\"to stderr\", file=sys.stderr)"
SLEEP = "import time; time.sleep(60)"
BASE = (f'[stacks.j.apps.web]\ncommand = ["{PY}", "-c", "import time; time.sleep(1e9)"]\n'
        + job("echo", ECHO) + job("slow", SLEEP) + job("late", SLEEP, "timeout = 1\n"))


def jobs_by_id(cluster: Any) -> dict[int, dict[str, Any]]:
    return {j["id"]: j for j in cluster.call("job.list", {"limit": 1000})["jobs"]}


def test_run_wait_dedup_conflict_and_logs(cluster):
    cluster.up(BASE)
    res = cluster.cli("job", "run", "j/echo", "--key", "k-1", "--arg", "a b", "--arg=-x",
                      "--wait")
    assert res.ok, res
    first = res.out["job"]
    assert (first["state"], first["outcome"], first["exit_code"]) == \
        ("succeeded", "success", 0)
    assert res.out["deduplicated"] is False
    assert first["duration"] is not None and first["started_at"] <= first["ended_at"]
    assert [h["to"] for h in first["history"]] == ["admitted", "starting", "running",
                                                   "succeeded"]

    again = cluster.cli("job", "run", "j/echo", "--key", "k-1", "--arg", "a b", "--arg=-x")
    assert again.ok and again.out["deduplicated"] is True
    assert again.out["job"]["id"] == first["id"]
    # --wait on a record that has ended: its history all the same, and the note
    waited = cluster.cli("job", "run", "j/echo", "--key", "k-1", "--arg", "a b", "--arg=-x",
                         "--wait")
    assert waited.ok and waited.out["deduplicated"] is True
    assert [h["to"] for h in waited.out["job"]["history"]] == [
        "admitted", "starting", "running", "succeeded"]
    text = cluster.cli_text("job", "run", "j/echo", "--key", "k-1", "--arg", "a b",
                            "--arg=-x", "--wait")
    assert "succeeded" in text and "(deduplicated: this key's record)" in text
    assert "admitted" in text, text   # the history is printed

    other = cluster.cli("job", "run", "j/echo", "--key", "k-1", "--arg", "c")
    assert other.code == 1
    err = other.out["error"]
    assert err["code"] == "CONFLICT" and err["data"] == {"job": first["id"], "key": "k-1"}
    assert f"job {first['id']}" in err["msg"]

    logs = cluster.cli("job", "logs", str(first["id"]))
    assert logs.ok and isinstance(logs.out, str), logs
    recs = [json.loads(line) for line in logs.out.splitlines()]
    # two pipes: their relative order is not defined, each one's is
    assert sorted((r["stream"], r["data"].strip()) for r in recs) == [
        ("stderr", "to stderr"), ("stdout", f"hello {first['id']} a b -x")]
    assert {(r["stack"], r["app"], r["instance"]) for r in recs} == \
        {("j", "job:echo", first["id"])}
    assert len(jobs_by_id(cluster)) == 1

    unknown = cluster.cli("job", "run", "j/nope")
    assert unknown.code == 1 and unknown.out["error"]["code"] == "NOT_FOUND"

    path = cluster.write_config(BASE + job("nope", ECHO), "v2.toml")
    plan = cluster.cli("plan", "--config", str(path), check=True).out
    assert (plan["changes"], plan["jobs"]) == ([], [{"action": "add", "job": "j/nope"}])
    applied = cluster.cli("apply", plan["id"], "--wait", check=True).out
    assert applied["outcome"] == "success"
    ran = cluster.cli("job", "run", "j/nope", "--wait")
    assert ran.ok and ran.out["job"]["state"] == "succeeded"


def test_twenty_clients_submitting_one_key_at_once_make_one_record(cluster):
    cluster.up(BASE)
    barrier = threading.Barrier(20)
    answers: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def submit() -> None:
        try:
            with cluster.api(timeout=60) as c:
                barrier.wait()
                answers.append(c.call("job.run", {"template": "j/echo", "key": "once"}))
        except BaseException as exc:
            errors.append(exc)
    threads = [threading.Thread(target=submit) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(answers) == 20
    assert len({a["job"]["id"] for a in answers}) == 1
    assert sorted(a["deduplicated"] for a in answers) == [False] + [True] * 19
    cluster.wait(lambda: jobs_by_id(cluster)[answers[0]["job"]["id"]]["state"]
                 == "succeeded", 30, "the one job to succeed")
    assert list(jobs_by_id(cluster)) == [answers[0]["job"]["id"]]


def test_withdraw_stop_timeout_and_max_concurrent(cluster):
    cluster.up(BASE)
    running = cluster.call("job.run", {"template": "j/slow"})["job"]["id"]
    waiting = cluster.call("job.run", {"template": "j/slow"})["job"]["id"]
    cluster.wait(lambda: jobs_by_id(cluster)[running]["state"] == "running", 20, "running")
    shown = cluster.call("job.show", {"id": waiting})
    assert (shown["state"], shown["waiting_for"]) == ("admitted", "max_concurrent 1 reached")

    for _ in range(2):  # a retried withdrawal (its answer lost) gives the same answer
        w = cluster.cli("job", "withdraw", str(waiting))
        assert w.ok and (w.out["state"], w.out["outcome"]) == ("withdrawn", "withdrawn")
    refused = cluster.cli("job", "withdraw", str(running))
    assert refused.code == 1 and refused.out["error"]["code"] == "CONFLICT"
    assert "job stop" in refused.out["error"]["msg"]

    pid = jobs_by_id(cluster)[running]["pid"]
    live = {r[0] for r in cluster.pids().values()}
    assert pid in live
    stopped = cluster.cli("job", "stop", str(running), check=True).out
    assert (stopped["state"], stopped["outcome"], stopped["settled"]) == \
        ("failed", "stopped", True)
    assert stopped["signal"] == 15 and pid not in {r[0] for r in cluster.pids().values()}
    again = cluster.cli("job", "stop", str(running))
    assert again.code == 1 and again.out["error"]["code"] == "CONFLICT"

    late = cluster.cli("job", "run", "j/late", "--wait", timeout=60)
    assert late.code == 1
    assert (late.out["job"]["state"], late.out["job"]["outcome"]) == ("timed_out", "timeout")
    assert 0.9 <= late.out["job"]["duration"] < 10
    assert jobs_by_id(cluster)[waiting]["attempt"] == 0          # never started


def test_a_job_waits_for_its_after_apps_and_a_stopped_stack(cluster):
    ready_later = (f'[stacks.j.apps.db]\ncommand = ["{PY}", "-c", "import time; '
                   'time.sleep(1e9)"]\nready = { kind = "delay", delay = 3 }\n'
                   + job("migrate", ECHO, 'after = ["db"]\n'))
    cluster.up(ready_later)
    rec = cluster.call("job.run", {"template": "j/migrate"})["job"]
    shown = cluster.call("job.show", {"id": rec["id"]})
    if shown["state"] == "admitted":
        assert shown["waiting_for"] == "apps not ready: db"
    cluster.wait(lambda: jobs_by_id(cluster)[rec["id"]]["state"] == "succeeded", 30, "done")
    db_ready = cluster.apps()["j/db/0"]
    assert db_ready["ready"]

    review = cluster.cli("stack", "stop", "j", "--dry-run", check=True).out
    cluster.cli("stack", "stop", "j", "--digest", review["digest"], check=True)
    held = cluster.call("job.run", {"template": "j/migrate"})["job"]["id"]
    assert cluster.call("job.show", {"id": held})["waiting_for"] == "stack j is stopped"
    try:
        cluster.call("job.stop", {"id": held})
        raise AssertionError("stop of an admitted job must be refused")
    except Conflict as exc:
        assert "withdraw" in exc.msg
    except TenureError:
        raise
    cluster.cli("stack", "start", "j", check=True)
    cluster.wait(lambda: jobs_by_id(cluster)[held]["state"] == "succeeded", 30, "started")


def test_a_schedule_admits_its_due_time_once_across_a_handoff(cluster):
    marker = cluster.home / "runs"
    cluster.up(f'[stacks.j.jobs.tick]\ncommand = ["/bin/sh", "-c", '
               f'"echo $TENURE_JOB_KEY >> {marker}"]\nschedule = "* * * * *"\n')
    release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    up = cluster.cli("backend", "upgrade", release, timeout=300)   # the mark is handed on
    assert up.ok, up
    cluster.wait(lambda: any(j["state"] == "succeeded" for j in
                             cluster.call("job.list", {})["jobs"]), 90, "a scheduled run")
    [rec] = [j for j in cluster.call("job.list", {})["jobs"] if j["state"] == "succeeded"]
    assert rec["source"] == "schedule" and rec["key"].startswith("schedule:j/tick:")
    assert rec["key"].endswith(":00Z") and rec["due_at"] % 60 == 0
    assert rec["started_at"] - rec["due_at"] < 30
    assert marker.read_text().splitlines() == [rec["key"]]


SCHEDULED = ('[stacks.r.jobs.j]\ncommand = ["sh", "-c", "echo run $1; sleep 1; echo end", "x"]\n'
             '[stacks.r.jobs.nightly]\ncommand = ["sh", "-c", "echo report"]\n'
             'schedule = "* * * * *"\n')


def test_a_schedule_key_is_reserved_and_a_taken_due_time_stops_nothing(cluster):
    """A client key in the schedule's form is BAD_REQUEST. A ledger that already holds
    one with other arguments (written before keys were reserved): its due time is
    recorded missed once, saying why, and jobs keep starting."""
    from backend.jobs.ledger import Admission, Ledger, make_spec
    from backend.jobs.model import JobTemplate
    from backend.store import BackendStore

    cluster.up(SCHEDULED)
    soon = time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime(time.time() + 60))
    refused = cluster.cli("job", "run", "r/nightly", "--key", f"schedule:r/nightly:{soon}",
                          "--arg", "manual")
    assert refused.code == 2 and refused.out["error"]["code"] == "BAD_REQUEST", refused
    assert "reserved" in refused.out["error"]["msg"]

    assert cluster.down().ok
    due = (int(time.time()) // 60 + 2) * 60         # a minute boundary well after the up
    taken = f"schedule:r/nightly:{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(due))}"
    store = BackendStore(cluster.layout.backend_db)
    try:
        nightly = JobTemplate(name="nightly", stack="r", command=("sh", "-c", "echo report"))
        Ledger(store).admit(Admission("r", "nightly", make_spec(nightly, ["manual"]),
                                      key=taken), time.time())
    finally:
        store.close()
    cluster.up()
    cluster.wait(lambda: any(j["due_at"] == due for j in cluster.call(
        "job.list", {"limit": 100})["jobs"]), due - time.time() + 30, "the due time handled")
    [missed] = [j for j in cluster.call("job.list", {"limit": 100})["jobs"]
                if j["due_at"] == due]
    assert (missed["state"], missed["key"], missed["source"]) == ("missed", None, "schedule")
    assert missed["evidence"]["key"] == taken
    assert "held by another submission" in missed["evidence"]["reason"]
    ran = cluster.cli("job", "run", "r/j", "--arg", "after", "--wait", timeout=60)
    assert ran.ok and ran.out["job"]["state"] == "succeeded", ran
    assert cluster.backend_log().count(taken) <= 2  # said once, not every tick
