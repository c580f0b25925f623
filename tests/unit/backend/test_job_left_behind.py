"""What outlives a job's leader is stopped, as an app's is: the owner's ``exit`` event of
a job's launch naming ``descendants`` makes the runner ask the owner to stop that launch
key (the launch's own stop policy); the record keeps the outcome its leader gave it and
its history says how many outlived it. A failed stop is logged, never an unhandled task
exception; a stop refused for a stale epoch fences the runner."""

from __future__ import annotations

import logging
from typing import Any

from backend.generation import Generation
from backend.jobs import machine as jm
from backend.testing import FakeOwner
from protocol.errors import TransportLost

from .test_job_runner import FakeClock, run, started, until


def left_behind(owner: FakeOwner, key: str, count: int) -> dict[str, Any]:
    """The owner's exit event of ``key``, whose leader exited 0 leaving ``count``
    processes running."""
    return {**owner.exit(key, 0), "descendants": count}


def test_what_outlived_a_jobs_leader_is_stopped(tmp_path, caplog):
    caplog.set_level(logging.INFO)

    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        rec, _ = jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        key = rec.job.launch_key
        assert key is not None
        jobs.on_observation(left_behind(owner, key, 2))
        await until(lambda: bool(owner.sent("stop")), "the left-behind stop sent")
        assert owner.sent("stop") == [{"launch_key": key}]   # the launch's own policy
        assert [e for m, _, e in owner.calls if m == "stop"] == [jobs.epoch]
        await until(lambda: not jobs.busy(), "the stop task ended")
        # the leader succeeded: so does the record
        assert (rec.job.state, rec.job.outcome) == (jm.State.SUCCEEDED, jm.Outcome.SUCCESS)
        exited = jobs.ledger.history(rec.id)[-1]
        assert (exited["event"], exited["detail"]) == ("Exited", {"descendants": 2})
    run(tmp_path, body)
    said = [r.getMessage() for r in caplog.records if "outlived" in r.getMessage()]
    assert len(said) == 1 and "2 process(es) outlived the leader of job:" in said[0]
    assert not [r for r in caplog.records if "task failed" in r.getMessage()]


def test_an_exit_without_descendants_stops_nothing(tmp_path):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        rec, _ = jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        assert rec.job.launch_key is not None
        jobs.on_observation(owner.exit(rec.job.launch_key, 0))
        await until(lambda: not jobs.busy(), "nothing in flight")
        assert not owner.sent("stop") and rec.job.state is jm.State.SUCCEEDED
        assert jobs.ledger.history(rec.id)[-1]["detail"] is None
    run(tmp_path, body)


def test_a_failed_left_behind_stop_is_logged_not_raised(tmp_path, caplog):
    caplog.set_level(logging.INFO)

    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        def broken(method: str, params: dict[str, Any]) -> None:
            if method == "stop":
                raise TransportLost("connection broke", {"request": 1})
        jobs = gen.api.jobs
        rec, _ = jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        assert rec.job.launch_key is not None
        owner.before = broken
        jobs.on_observation(left_behind(owner, rec.job.launch_key, 1))
        await until(lambda: bool(owner.sent("stop")) and not jobs.busy(),
                    "the left-behind stop tried")
        assert (rec.job.state, rec.job.outcome) == (jm.State.SUCCEEDED, jm.Outcome.SUCCESS)
        assert not jobs.fenced
    run(tmp_path, body)
    failed = [r for r in caplog.records if "was not stopped" in r.getMessage()]
    assert len(failed) == 1 and failed[0].levelno == logging.WARNING
    assert "connection broke" in failed[0].getMessage()
    assert not [r for r in caplog.records if "task failed" in r.getMessage()]


def test_a_left_behind_stop_refused_for_a_stale_epoch_fences(tmp_path, caplog):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        def newer(method: str, params: dict[str, Any]) -> None:
            if method == "stop":
                owner.epoch = 2   # a newer generation holds the owner
        jobs = gen.api.jobs
        rec, _ = jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        assert rec.job.launch_key is not None
        owner.before = newer
        jobs.on_observation(left_behind(owner, rec.job.launch_key, 1))
        await until(lambda: jobs.fenced, "fenced by the refused stop")
        await until(lambda: not jobs.busy(), "the stop task ended")
        assert rec.job.state is jm.State.SUCCEEDED
    run(tmp_path, body)
    assert not [r for r in caplog.records if "task failed" in r.getMessage()]


def test_job_show_says_what_outlived_the_job():
    from backend.cli.jobs import render_show
    job = {"id": 7, "stack": "s", "template": "bg", "state": "succeeded",
           "outcome": "success", "exit_code": 0, "signal": None, "key": None,
           "argv": ["sh", "-c", "x"], "attempt": 1, "launch_key": "job:ab:7:1",
           "pid": 4001, "submitted_at": 1.0, "started_at": 1.0, "ended_at": 2.0,
           "duration": 1.0,
           "history": [{"at": 2.0, "event": "Exited", "from": "running",
                        "to": "succeeded", "detail": {"descendants": 2}},
                       {"at": 2.0, "event": "Exited", "from": "running",
                        "to": "succeeded", "detail": {"proof": "exit observed by the owner",
                                                      "descendants": 1}},
                       {"at": 2.0, "event": "Exited", "from": "running",
                        "to": "succeeded", "detail": None}]}
    rows = render_show(job).splitlines()[-3:]
    assert rows[0].endswith("running -> succeeded   outlived by 2 processes, which "
                            "tenure stops")
    assert rows[1].endswith("outlived by 1 process, which tenure stops")
    assert rows[2].endswith("running -> succeeded")
