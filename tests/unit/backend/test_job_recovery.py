"""A ``recovery_required`` record and the owner's later proof, with the real ledger, a
fake owner and a fake clock: the proof (the key live, a ``launched``, ``exit`` or
``launch_failed`` observation) settles it — in the audit of a running generation and
when a new one resumes — starting nothing; no sign of the launch changes nothing;
``resolve --started`` keeps the pid and exit the owner shows (its launch row too); a
resolve that races a proof, or whose record moved to another attempt, is refused."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from backend.generation import Generation
from backend.jobs import machine as jm
from backend.jobs.resume import audit, resolve, resume
from backend.jobs.runner import LAUNCH_TRIES
from backend.testing import FakeOwner
from protocol.errors import Conflict, TransportLost

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_job_runner import FakeClock, job_launches, run, started, until
from test_job_runner import _leave_starting as leave_starting


def _job_launch(key: str, job_id: int) -> dict[str, Any]:
    """The owner's side of a launch of ``key`` (what a lost launch request carried)."""
    return {"launch_key": key, "stack": "s", "app": "job:migrate", "instance": job_id,
            "generation": int(key.rsplit(":", 1)[1])}


def _left_recovery_required(tmp_path: Path, owner: FakeOwner) -> tuple[int, str]:
    """A record a previous generation left ``starting``, made recovery_required by the
    next one: the owner showed no sign of the launch then."""
    job_id, key = leave_starting(tmp_path, owner, False, None)

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        assert (await resume(gen.api.jobs))["recovery_required"] == [job_id]
    run(tmp_path, body, owner)
    return job_id, key


def test_recovery_required_settles_when_owner_shows_the_launch(tmp_path, caplog):
    """Was: the owner launched it but answered none of the launch requests; once it
    showed the launch (live in its inventory) the record stayed recovery_required for
    ever. The audit settles it from that proof (running, the owner's pid), starting
    nothing, and its exit then ends it."""
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs

        def before(method: str, params: dict[str, Any]) -> None:
            if method == "launch" and params["app"].startswith("job:"):
                owner._launch(params)            # it ran; no answer came back
                raise TransportLost("connection broke", {"request": 1})
        owner.before = before
        rec, _ = jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        assert rec.job.state is jm.State.RECOVERY_REQUIRED
        key = rec.job.launch_key
        assert key is not None
        with caplog.at_level("WARNING", logger="tenure.jobs"):
            assert await audit(jobs) == [rec.id]
        now = jobs.record(rec.id)
        assert (now.job.state, now.job.pid, now.job.start_ticks) == \
            (jm.State.RUNNING, owner.live[key]["pid"], owner.live[key]["start_ticks"])
        res = now.job.resolution
        assert res is not None and (res["started"], res["by"]) == (True, "the backend (epoch 1)")
        assert res["proof"]["shows"] == "it is live in the owner's inventory"
        assert res["proof"]["live"]["pid"] == now.job.pid
        assert [(h["event"], h["to"]) for h in jobs.ledger.history(rec.id)][-2:] == \
            [("Uncertain", "recovery_required"), ("Proven", "running")]
        assert jobs.ledger.history(rec.id)[-1]["detail"]["proof"]["live"]["pid"] == now.job.pid
        assert len(job_launches(owner)) == LAUNCH_TRIES           # nothing was sent
        said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert f"job {rec.id}: was recovery_required; settled from the owner's evidence " \
            "(it is live in the owner's inventory): running" in said
        jobs.on_observation(owner.exit(key, 0))
        assert (now.job.state, now.job.outcome) == (jm.State.SUCCEEDED, jm.Outcome.SUCCESS)
    run(tmp_path, body)


def test_a_new_generation_settles_recovery_required_from_the_owners_exit(tmp_path):
    """Was: a record left recovery_required stayed so in every later generation, even
    with the launch and its exit in the owner's observations."""
    owner = FakeOwner()
    job_id, key = _left_recovery_required(tmp_path, owner)
    owner._launch(_job_launch(key, job_id))
    launched, ended = owner.events[-1], owner.exit(key, 3)
    launched["at"], ended["at"] = 1_000_010.0, 1_000_012.5
    launches = len(job_launches(owner))

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        clock.now += 60
        report = await resume(gen.api.jobs)
        wire = gen.api.jobs.record(job_id).to_wire()
        assert (wire["state"], wire["outcome"], wire["exit_code"], wire["pid"]) == \
            ("failed", "exit-code", 3, launched["pid"])
        assert report["proven"] == [job_id] and report["recovery_required"] == []
        assert (wire["started_at"], wire["ended_at"]) == (1_000_010.0, 1_000_012.5)
        assert wire["resolution"]["proof"]["shows"] == "its exit was observed"
        assert [h["event"] for h in gen.api.jobs.ledger.history(job_id)][-3:] == \
            ["Uncertain", "Proven", "Exited"]
        assert len(job_launches(owner)) == launches
    run(tmp_path, body, owner)


def test_recovery_required_without_evidence_stays_and_costs_one_owner_read(tmp_path):
    """No sign of the launch proves nothing: the record stays as it is. The owner is
    asked (inventory and observations, once per audit) only while a record waits."""
    owner = FakeOwner()
    job_id, _ = leave_starting(tmp_path, owner, False, None)

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        calls = len(owner.calls)
        assert await audit(jobs) == [] and owner.calls[calls:] == []   # nothing waits
        await resume(jobs)
        before, history = jobs.record(job_id).to_wire(), jobs.ledger.history(job_id)
        assert before["state"] == "recovery_required"
        calls = len(owner.calls)
        assert await audit(jobs) == []
        assert [m for m, _, _ in owner.calls[calls:]] == ["inventory", "observations.read"]
        assert jobs.record(job_id).to_wire() == before
        assert jobs.ledger.history(job_id) == history
        assert not job_launches(owner)
    run(tmp_path, body, owner)


def test_a_new_generation_settles_recovery_required_from_the_owners_launch_row(tmp_path):
    """Was: a record left recovery_required whose start only the owner's launch row still
    showed (its events had left the ring) waited for `resolve`, though the row proves
    how it went. A new generation reads the row once and settles it; later audits do
    not ask again."""
    owner = FakeOwner()
    job_id, key = _left_recovery_required(tmp_path, owner)
    owner._launch(_job_launch(key, job_id))
    pid = owner.live[key]["pid"]
    owner.exit(key, 3)
    owner.events.clear()                         # the ring has moved on
    launches = len(job_launches(owner))

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        assert (await resume(jobs))["proven"] == [job_id]
        wire = jobs.record(job_id).to_wire()
        assert (wire["state"], wire["outcome"], wire["exit_code"], wire["pid"]) == \
            ("failed", "exit-code", 3, pid)
        assert wire["resolution"]["proof"]["shows"] == "the owner's launch row"
        assert wire["resolution"]["by"] == "the backend (epoch 1)"
        assert len(job_launches(owner)) == launches                 # started nothing
    run(tmp_path, body, owner)


def test_a_launch_row_is_read_once_per_generation(tmp_path):
    """A waiting record whose key has no row costs one ``inspect`` in a generation: the
    audits after it read the inventory and the ring only."""
    owner = FakeOwner()
    job_id, key = _left_recovery_required(tmp_path, owner)

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        calls = len(owner.calls)
        assert (await resume(jobs))["proven"] == []
        assert [p for m, p, _ in owner.calls[calls:] if m == "inspect"] == \
            [{"launch_key": key}]
        calls = len(owner.calls)
        assert await audit(jobs) == [] and await audit(jobs) == []
        assert "inspect" not in [m for m, _, _ in owner.calls[calls:]]
        assert jobs.record(job_id).job.state is jm.State.RECOVERY_REQUIRED
    run(tmp_path, body, owner)


def test_recovery_required_settles_as_failed_when_the_owner_shows_launch_failed(tmp_path):
    """The owner's launch_failed observation for the key proves it never started."""
    owner = FakeOwner()
    job_id, key = _left_recovery_required(tmp_path, owner)

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        owner._emit("launch_failed", key, code="LAUNCH_FAILED", msg="no such file: migrate")
        assert await audit(jobs) == [job_id]
        rec = jobs.record(job_id)
        assert (rec.job.state, rec.job.outcome, rec.job.pid) == \
            (jm.State.FAILED, jm.Outcome.LAUNCH_FAILED, None)
        ev = rec.job.evidence
        assert ev is not None and ev["launch_key"] == key and ev["live"] is None
        assert ev["launch_refused"] == {"code": "LAUNCH_FAILED",
                                        "msg": "no such file: migrate"}
        res = rec.job.resolution
        assert res is not None and res["started"] is False
        assert res["proof"]["shows"] == "its launch was refused"
        with pytest.raises(Conflict, match="settled from the owner's evidence: its launch "
                           "was refused"):
            await resolve(jobs, job_id, False, "", "ops")
        assert not job_launches(owner)
    run(tmp_path, body, owner)


def test_resolve_racing_a_proof_is_refused_saying_it_was_settled(tmp_path):
    """The operator's resolve reads the owner while the audit settles the record from
    the owner's proof: the resolve is refused (CONFLICT) saying it was settled from the
    owner's evidence and how it stands, and the record stays driven by the runner."""
    owner = FakeOwner()
    job_id, key = _left_recovery_required(tmp_path, owner)

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        owner.hold("inventory")
        resolving = asyncio.create_task(resolve(jobs, job_id, True, "it ran", "ops"))
        await until(lambda: owner.calls[-1][0] == "inventory", "the resolve reads the owner")
        owner._launch(_job_launch(key, job_id))        # the owner shows the launch now
        pid = owner.live[key]["pid"]
        owner.release("inventory")
        assert await audit(jobs) == [job_id]           # before the resolve goes on
        with pytest.raises(Conflict) as err:
            await resolving
        assert err.value.msg == (f"job {job_id} (s/migrate) was settled from the owner's "
                                 f"evidence: it started (pid {pid}) and is running; there "
                                 "is nothing left to resolve")
        rec = jobs.record(job_id)
        assert rec.job.state is jm.State.RUNNING and jobs.records[job_id] is rec
        assert rec.job.resolution["by"] == "the backend (epoch 1)"
        jobs.on_observation(owner.exit(key, 0))
        assert rec.job.state is jm.State.SUCCEEDED
        with pytest.raises(Conflict, match=r"and ended succeeded, success \(exit 0\)"):
            await resolve(jobs, job_id, True, "it ran", "ops")
    run(tmp_path, body, owner)


@pytest.mark.parametrize("shown", ["launch-row", "live"])
def test_resolve_started_keeps_the_pid_and_exit_the_owner_shows(tmp_path, shown):
    """Was: `resolve --started` ended the record `resolved` without the pid, start or
    exit the owner knew. Now the record is settled from what the owner shows: its live
    launch, or — the observation ring having moved on — its launch row."""
    from types import SimpleNamespace

    from backend.jobs.api import S_RESOLVE, JobApi
    from protocol.server import Call
    owner = FakeOwner()
    job_id, key = _left_recovery_required(tmp_path, owner)

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        owner._launch(_job_launch(key, job_id))
        pid = owner.live[key]["pid"]
        if shown == "launch-row":
            owner.exit(key, 3)
            owner.events.clear()                 # only the owner's launch row knows
        calls = len(owner.calls)
        params = S_RESOLVE.validate({"id": job_id, "started": True, "note": "it ran"})
        conn = SimpleNamespace(peer=SimpleNamespace(uid=0))   # the operator's connection
        call = Call("job.resolve", params, None, 1, conn)  # type: ignore[arg-type]
        wire = await JobApi(gen.api.jobs).resolve(call)
        assert "launch" not in [m for m, _, _ in owner.calls[calls:]]   # started nothing
        assert wire["pid"] == pid
        if shown == "launch-row":
            assert (wire["state"], wire["outcome"], wire["exit_code"]) == \
                ("failed", "exit-code", 3)
            assert wire["resolution"]["proof"]["shows"] == "the owner's launch row"
            assert wire["resolution"]["proof"]["row"]["exit"]["exit_code"] == 3
        else:
            assert (wire["state"], wire["outcome"]) == ("running", None)
            assert wire["resolution"]["proof"]["shows"] == "it is live in the owner's inventory"
        assert {k: wire["resolution"][k] for k in ("started", "by", "note")} == \
            {"started": True, "by": "uid 0", "note": "it ran"}
    run(tmp_path, body, owner)


def test_resolve_started_takes_the_operators_word_when_the_owner_cannot_be_read(tmp_path):
    """`--started` does not depend on the owner being up: the record ends `resolved`,
    and its history row says the owner could not be read."""
    owner = FakeOwner()
    job_id, _ = _left_recovery_required(tmp_path, owner)

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        def unreadable(method: str, params: dict[str, Any]) -> None:
            if method == "inventory":
                raise TransportLost("connection broke", {"request": 1})
        owner.before = unreadable
        rec = await resolve(gen.api.jobs, job_id, True, "checked by hand", "ops")
        assert (rec.job.state, rec.job.outcome) == (jm.State.RESOLVED,
                                                    jm.Outcome.RESOLVED_STARTED)
        assert rec.job.pid is None and "proof" not in rec.job.resolution  # type: ignore[operator]
        last = gen.api.jobs.ledger.history(job_id)[-1]
        assert last["event"] == "Resolve"
        assert last["detail"]["owner"]["unreadable"]["code"] == "TRANSPORT_LOST"
    run(tmp_path, body, owner)


def test_resolve_refuses_a_decision_about_an_attempt_that_moved_on(tmp_path):
    """While `resolve` read the owner about attempt 1, the record was resolved, started
    attempt 2 and became recovery_required again: the decision (about attempt 1) is
    refused, not applied to attempt 2."""
    owner = FakeOwner()
    job_id, key = _left_recovery_required(tmp_path, owner)

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs

        def moved_on(method: str, params: dict[str, Any]) -> None:
            if method == "inventory" and jobs.record(job_id).job.attempt == 1:
                other = jobs.record(job_id)
                jobs.apply(other, jm.Resolve(False, "", "another operator"))
                jobs.apply(other, jm.Start(jobs.ledger.launch_prefix))
                jobs.apply(other, jm.Uncertain({"reason": "no answer"}))
        owner.before = moved_on
        with pytest.raises(Conflict, match="attempt 2 became recovery_required while the "
                           f"owner was read about {key}"):
            await resolve(jobs, job_id, False, "not in ps", "ops")
        rec = jobs.record(job_id)
        assert (rec.job.state, rec.job.attempt) == (jm.State.RECOVERY_REQUIRED, 2)
        assert rec.job.resolution["by"] == "another operator"
    run(tmp_path, body, owner)
