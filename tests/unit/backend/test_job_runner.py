"""The job runner with a fake owner and a fake clock (nothing sleeps): a start commits
``starting`` and invalidates the certificate before the owner hears of it; an unanswered
launch is asked again with the same key and ends ``recovery_required`` when no answer
ever comes; timeouts stop; a drain lets a start finish; a new generation settles
``starting`` records from evidence only and never launches them; ``resolve``; a launch
answer the ledger could not record is recorded at a later tick."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from backend import instance as im
from backend.certify import publish_certificate
from backend.config import parse_config
from backend.generation import Generation
from backend.jobs import machine as jm
from backend.jobs.ledger import Record
from backend.jobs.resume import audit, resolve, resume
from backend.jobs.runner import LAUNCH_TRIES
from backend.testing import FakeOwner, fake_generation, no_sleep
from protocol.errors import Conflict, ConnectFailed, StaleEpoch, StorageFailed, TransportLost

PY = "/usr/bin/python3"
CONFIG = (f'[stacks.s.apps.db]\ncommand = ["{PY}"]\n'
          '[stacks.s.jobs.migrate]\ncommand = ["migrate"]\nenv = { A = "1" }\n'
          'timeout = 30\n'
          '[stacks.s.jobs.pair]\ncommand = ["pair"]\nmax_concurrent = 2\n'
          '[stacks.s.jobs.after]\ncommand = ["after"]\nafter = ["db"]\n'
          '[stacks.s.jobs.asnobody]\ncommand = ["id"]\nuser = "nobody"\numask = "0027"\n'
          'env = { USER = "mine" }\n')


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.mono_now = 500.0

    def wall(self) -> float:
        return self.now

    def mono(self) -> float:
        return self.mono_now


async def until(done: Callable[[], bool], what: str, turns: int = 500) -> None:
    for _ in range(turns):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{what}: not reached")


def generation(tmp_path: Path, owner: FakeOwner) -> tuple[Generation, FakeClock]:
    gen = fake_generation(tmp_path, owner, CONFIG)
    clock = FakeClock()
    gen.api.jobs.clock = clock
    gen.api.jobs.sleep = no_sleep
    return gen, clock


def run(tmp_path: Path, body: Callable[[Generation, FakeOwner, FakeClock], Any],
        owner: FakeOwner | None = None) -> None:
    async def main() -> None:
        o = owner or FakeOwner()
        gen, clock = generation(tmp_path, o)
        try:
            await body(gen, o, clock)
        finally:
            await gen.close()
    asyncio.run(main())


def job_launches(owner: FakeOwner) -> list[dict[str, Any]]:
    return [p for p in owner.sent("launch") if p["launch_key"].startswith("job:")]


def state(gen: Generation, job_id: int) -> jm.State:
    return gen.api.jobs.record(job_id).job.state


async def started(gen: Generation, rec: Record) -> None:
    gen.api.jobs.tick()
    await until(lambda: rec.job.state is not jm.State.ADMITTED
                and rec.id not in gen.api.jobs._starting, "start settled")


def test_a_start_is_durable_before_the_owner_hears_of_it(tmp_path):
    seen: dict[str, Any] = {}

    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        def before(method: str, params: dict[str, Any]) -> None:
            if method == "launch" and params["launch_key"].startswith("job:"):
                row = gen.api.jobs.ledger.get(params["instance"])
                seen["state"] = row.job.state
                seen["certificate"] = gen.recovery.read()["valid"]  # type: ignore[union-attr]
                seen["params"] = params
        await until(lambda: gen.sup.quiet(), "the app started")
        gen.recovery.publish({"test": 1})  # type: ignore[union-attr]
        owner.before = before
        rec, dup = gen.api.jobs.submit("s/migrate", "k", ["--all"])
        assert not dup and rec.job.state is jm.State.ADMITTED
        await started(gen, rec)
        assert seen["state"] is jm.State.STARTING
        # the certificate vouches for apps only: a job start leaves it valid
        assert seen["certificate"] is True
        p = seen["params"]
        assert p["launch_key"] == f"{gen.api.jobs.ledger.launch_prefix}:{rec.id}:1"
        assert (p["stack"], p["app"], p["instance"], p["generation"]) == \
            ("s", "job:migrate", rec.id, 1)
        assert p["argv"] == ["migrate", "--all"]
        assert {k: p["env"][k] for k in ("A", "TENURE_JOB", "TENURE_JOB_ID", "TENURE_JOB_KEY")} \
            == {"A": "1", "TENURE_JOB": "migrate", "TENURE_JOB_ID": str(rec.id),
                "TENURE_JOB_KEY": "k"}
        assert rec.job.state is jm.State.RUNNING and rec.job.deadline == clock.mono_now + 30
        assert [r["launch_key"] for r in gen.api.jobs.inventory()] == [p["launch_key"]]
        assert gen.api.busy() is False and await publish_certificate(gen)
        gen.api.jobs.on_observation(owner.exit(p["launch_key"], 0))
        assert rec.job.state is jm.State.SUCCEEDED
        assert rec.id not in gen.api.jobs.records and gen.api.jobs.inventory() == []
    run(tmp_path, body)


def test_an_unanswered_launch_is_asked_again_with_the_same_key(tmp_path):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        lost = {"n": 2}

        def before(method: str, params: dict[str, Any]) -> None:
            if method == "launch" and params["app"].startswith("job:") and lost["n"]:
                lost["n"] -= 1
                if lost["n"] == 0:   # the second one reached the owner, its answer did not
                    owner._launch(params)
                raise TransportLost("connection broke", {"request": 1})
        owner.before = before
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        keys = [p["launch_key"] for p in job_launches(owner)]
        assert len(keys) == 3 and len(set(keys)) == 1
        assert rec.job.state is jm.State.RUNNING
        assert [k for k in owner.live if k.startswith("job:")] == keys[:1]
    run(tmp_path, body)


def test_a_launch_never_answered_ends_recovery_required(tmp_path):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        def before(method: str, params: dict[str, Any]) -> None:
            if method == "launch" and params["app"].startswith("job:"):
                raise TransportLost("connection broke", {"request": 1})
        owner.before = before
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        assert len(job_launches(owner)) == LAUNCH_TRIES
        assert rec.job.state is jm.State.RECOVERY_REQUIRED
        assert rec.job.evidence["last_error"]["code"] == "TRANSPORT_LOST"  # type: ignore[index]
        gen.api.jobs.tick()
        await asyncio.sleep(0)
        assert len(job_launches(owner)) == LAUNCH_TRIES        # never started again
    run(tmp_path, body)


def test_a_launch_waits_for_an_owner_that_is_away_and_spends_no_attempt(tmp_path):
    """Was: five refused connections (an owner restarting) made the job
    recovery_required, though no request had reached any owner."""
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        away = {"n": 3 * LAUNCH_TRIES}

        def before(method: str, params: dict[str, Any]) -> None:
            if method == "launch" and params["app"].startswith("job:") and away["n"]:
                away["n"] -= 1
                raise ConnectFailed("no socket at owner.sock")
        owner.before = before
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        keys = [p["launch_key"] for p in job_launches(owner)]
        assert len(keys) == 3 * LAUNCH_TRIES + 1 and len(set(keys)) == 1
        assert rec.job.state is jm.State.RUNNING
    run(tmp_path, body)


def test_a_fenced_start_stays_starting_for_the_next_generation(tmp_path):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        def fence(method: str, params: dict[str, Any]) -> None:   # a newer grant exists
            if method == "launch" and params["launch_key"].startswith("job:"):
                owner.epoch = 2
        owner.before = fence
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        assert rec.job.state is jm.State.STARTING and gen.api.jobs.fenced
    run(tmp_path, body)


def test_timeout_stops_and_ends_timed_out(tmp_path):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        clock.mono_now += 29
        gen.api.jobs.tick()
        assert not owner.sent("stop")
        clock.mono_now += 1
        gen.api.jobs.tick()
        await until(lambda: bool(owner.sent("stop")), "stop sent")
        gen.api.jobs.on_observation(owner.events[-1])            # the exit the stop caused
        assert (rec.job.state, rec.job.outcome) == (jm.State.TIMED_OUT, jm.Outcome.TIMEOUT)
    run(tmp_path, body)


def test_max_concurrent_after_apps_and_order(tmp_path):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        recs = [jobs.submit("s/pair", None, [])[0] for _ in range(3)]
        jobs.tick()
        await until(lambda: not jobs._starting, "starts settled")
        assert [r.job.state for r in recs] == [jm.State.RUNNING, jm.State.RUNNING,
                                               jm.State.ADMITTED]
        assert jobs.waiting_for(recs[2]) == "max_concurrent 2 reached"
        gen.api.jobs.on_observation(owner.exit(recs[0].job.launch_key, 1))  # type: ignore[arg-type]
        jobs.tick()
        await until(lambda: recs[2].job.state is jm.State.RUNNING, "third started")
        assert recs[0].job.outcome is jm.Outcome.EXIT_CODE

        gen.sup.feed("s/db/0", im.StopRequested())
        after, _ = jobs.submit("s/after", None, [])
        jobs.tick()
        await asyncio.sleep(0)
        assert jobs.waiting_for(after) == "apps not ready: db"
        assert after.job.state is jm.State.ADMITTED
        # the owner silent (stopped): said first, for it is what the start waits for
        # (`job show` said `max_concurrent 1 reached`, its start never coming)
        gen.sup.owner_answers = lambda: False
        assert jobs.waiting_for(after) == ("the owner does not answer (`tenure status` "
                                           "says why)")
        gen.sup.owner_answers = lambda: True
        # db and the template taken out of the config: it waits for good, and says so
        gen.config = parse_config('[stacks.s.apps.other]\ncommand = ["x"]\n', "t.toml")
        assert jobs.waiting_for(after) == (
            f"apps not in the config: db (waits until they are added back; `tenure job "
            f"withdraw {after.id}` ends it)")
    run(tmp_path, body)


def test_a_drain_lets_a_start_finish_and_holds_new_ones(tmp_path):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        owner.hold("launch")
        first, _ = jobs.submit("s/pair", None, [])
        jobs.tick()
        await until(lambda: first.job.state is jm.State.STARTING, "starting")
        drain = asyncio.create_task(gen.drain(30.0))
        await until(lambda: gen.api.gate.paused, "drain began")
        second, _ = jobs.submit("s/pair", None, [])
        jobs.tick()                                               # holds: no new start
        assert not drain.done() and gen.api.running_steps() == [f"job {first.id} start"]
        owner.release("launch")
        drained = await drain
        assert drained["drained"] and drained["waited_for"] == [f"job {first.id} start"]
        assert first.job.state is jm.State.RUNNING and second.job.state is jm.State.ADMITTED
        gen.checkpoint(str(tmp_path / "cp.json"))
        gen.resume()
        jobs.tick()
        await until(lambda: second.job.state is jm.State.RUNNING, "second after resume")
    run(tmp_path, body)


# ---- a new generation ------------------------------------------------------------------

def _leave_starting(tmp_path: Path, owner: FakeOwner, launch: bool, exit_code: int | None
                    ) -> tuple[int, str]:
    """A generation that committed ``starting`` and died (maybe after the owner acted)."""
    out: dict[str, Any] = {}

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        actions = gen.api.jobs.apply(rec, jm.Start(gen.api.jobs.ledger.launch_prefix))
        key = actions[0].launch_key
        if launch:
            owner._launch(gen.api.jobs.launch_params(rec))
            if exit_code is not None:
                owner.exit(key, exit_code)
        out.update(id=rec.id, key=key)
    run(tmp_path, body, owner)
    return out["id"], out["key"]


@pytest.mark.parametrize(("launched", "exit_code", "want"), [
    (True, None, jm.State.RUNNING),           # live in the inventory
    (True, 3, jm.State.FAILED),               # launched and exited: both observed
    (False, None, jm.State.RECOVERY_REQUIRED),  # no sign at all: never launched by us
])
def test_a_new_generation_settles_starting_from_evidence_only(tmp_path, launched, exit_code,
                                                               want):
    owner = FakeOwner()
    job_id, key = _leave_starting(tmp_path, owner, launched, exit_code)
    launches_before = len(job_launches(owner))

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        report = await resume(gen.api.jobs)
        rec = gen.api.jobs.record(job_id)
        assert rec.job.state is want
        assert len(job_launches(owner)) == launches_before   # no launch was sent
        if want is jm.State.RECOVERY_REQUIRED:
            assert report["recovery_required"] == [job_id]
            ev = rec.job.evidence
            assert ev is not None and ev["launch_key"] == key and ev["live"] is None
            assert ev["events"] == {} and ev["observation_gap"] is False
            gen.api.jobs.tick()
            await asyncio.sleep(0)
            assert len(job_launches(owner)) == launches_before  # and none later
        if exit_code is not None:
            assert (rec.job.exit_code, rec.job.outcome) == (3, jm.Outcome.EXIT_CODE)
    run(tmp_path, body, owner)


def test_a_running_record_whose_exit_left_the_ring_is_read_back_from_its_row(tmp_path):
    owner = FakeOwner()
    out: dict[str, Any] = {}

    async def first(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        owner.exit(rec.job.launch_key, None, 9)  # type: ignore[arg-type]
        owner.events.clear()                     # as if the ring had moved on
        out["id"] = rec.id
    run(tmp_path, first, owner)

    async def second(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        live_before = dict(owner.live)
        await resume(gen.api.jobs)
        rec = gen.api.jobs.record(out["id"])
        assert (rec.job.state, rec.job.signal) == (jm.State.FAILED, 9)
        assert owner.live == live_before          # the read-back started nothing
    run(tmp_path, second, owner)


def test_an_exit_the_ledger_cannot_record_is_settled_once_it_can(tmp_path):
    """A job that ends while the disk is full: its exit could not be committed, and the
    error, raised into the observation reader, ended the backend generation (the
    guardian then failed to recover one on the full disk). The record stays running
    and the audit settles it from the owner's row once writes work again."""
    import sqlite3

    from backend.jobs.resume import audit

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        rec, _ = jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        save = jobs.ledger.save

        def full(*args: Any, **kw: Any) -> None:
            raise sqlite3.OperationalError("database or disk is full")
        jobs.ledger.save = full  # type: ignore[method-assign]
        jobs.on_observation(o.exit(rec.job.launch_key, 0))   # raises nothing
        assert state(gen, rec.id) is jm.State.RUNNING
        with pytest.raises(sqlite3.OperationalError):
            await audit(jobs)                                 # still full
        jobs.ledger.save = save  # type: ignore[method-assign]
        assert await audit(jobs) == [rec.id]
        assert state(gen, rec.id) is jm.State.SUCCEEDED
    run(tmp_path, body)


def _launch_answer_unrecorded_once(jobs: Any) -> Any:
    """Make the ledger's next write of a launch answer fail as a full disk does (once);
    returns the real save."""
    import sqlite3
    save = jobs.ledger.save

    def full_once(rec: Record, job: jm.Job, event: Any, *a: Any, **kw: Any) -> None:
        if isinstance(event, jm.Launched):
            jobs.ledger.save = save
            raise sqlite3.OperationalError("database or disk is full")
        save(rec, job, event, *a, **kw)
    jobs.ledger.save = full_once
    return save


def test_a_launch_answer_the_ledger_cannot_record_is_recorded_once_it_can(tmp_path,
                                                                          caplog):
    """The disk was full for a moment as the owner's answer to a launch came. Was: the
    record stayed `starting` in memory and in the ledger while its process ran: its
    timeout never fired, `job stop` answered CONFLICT for ever, and it held a
    max_concurrent slot. The answer is kept and recorded at a later tick."""

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        save = _launch_answer_unrecorded_once(jobs)
        rec, _ = jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        assert state(gen, rec.id) is jm.State.STARTING        # the answer not recorded
        assert jobs.ledger.save == save
        clock.mono_now += 3600
        clock.now += 3600
        jobs.tick()                                         # recorded, then timed out
        await audit(jobs)
        assert jobs.ledger.get(rec.id).job.state is jm.State.RUNNING
        assert rec.job.pid is not None and rec.job.stop_reason is jm.StopReason.TIMEOUT
        assert rec.job.started_at == clock.now - 3600       # when the answer came
        await until(lambda: bool(o.sent("stop")), "stop sent")
        jobs.on_observation(o.events[-1])                  # the exit the stop caused
        assert (state(gen, rec.id), rec.job.outcome) == (jm.State.TIMED_OUT,
                                                        jm.Outcome.TIMEOUT)
        assert len(job_launches(o)) == 1
        assert "its launch (Launched) could not be recorded" in caplog.text
    run(tmp_path, body)


def test_a_kept_launch_answer_the_record_moved_past_is_said_dropped(tmp_path, caplog):
    """The job ended (its exit observed) before the kept answer could be recorded: the
    answer is dropped, and the log says so rather than that it was recorded."""
    import logging
    caplog.set_level(logging.INFO, "tenure.jobs")

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        _launch_answer_unrecorded_once(jobs)
        rec, _ = jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        jobs.on_observation(o.exit(job_launches(o)[0]["launch_key"], 0))
        jobs.tick()
        assert state(gen, rec.id) is jm.State.SUCCEEDED
        assert "the record moved on meanwhile (it is succeeded)" in caplog.text
        assert "answer to its launch is recorded" not in caplog.text
    run(tmp_path, body)


def test_resolve_not_started_is_refused_while_the_owner_shows_the_launch(tmp_path):
    owner = FakeOwner()
    job_id, key = _leave_starting(tmp_path, owner, False, None)

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        await resume(jobs)
        owner.rows[key] = {"state": "running"}
        owner.live[key] = {"launch_key": key, "pid": 9, "start_ticks": 90}
        with pytest.raises(Conflict) as err:
            await resolve(jobs, job_id, False, "looked", "ops")
        assert err.value.data["evidence"]["live"]["pid"] == 9
        del owner.live[key], owner.rows[key]
        rec = await resolve(jobs, job_id, False, "not in ps", "ops")
        assert rec.job.state is jm.State.ADMITTED and rec.job.resolution["launch_key"] == key  # type: ignore[index]
        await started(gen, rec)
        assert rec.job.attempt == 2 and rec.job.launch_key == key[:-1] + "2"
        assert rec.job.state is jm.State.RUNNING
        with pytest.raises(Conflict):
            await resolve(jobs, job_id, True, "", "ops")
    run(tmp_path, body, owner)


def test_the_owners_launch_row_settles_a_start_whose_observations_left_the_ring(tmp_path):
    """Regression: a start the owner made and ended, its events gone from the ring,
    became recovery_required ("no sign of the launch") and `resolve --not-started` was
    accepted: the job ran a second time. The owner's launch row proves the start: the
    record is settled from it, and --not-started is refused while the row shows it."""
    owner = FakeOwner()
    job_id, _ = _leave_starting(tmp_path, owner, True, 0)
    owner.events.clear()                       # the ring moved on
    launches = len(job_launches(owner))

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        report = await resume(jobs)
        rec = jobs.record(job_id)
        assert report["ended"] == [job_id]
        assert (rec.job.state, rec.job.exit_code) == (jm.State.SUCCEEDED, 0)
        assert len(job_launches(owner)) == launches
    run(tmp_path, body, owner)


def test_resolve_not_started_is_refused_while_the_owners_row_shows_the_launch(tmp_path):
    owner = FakeOwner()
    job_id, key = _leave_starting(tmp_path, owner, False, None)

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        await resume(jobs)                     # no sign at all: recovery_required
        owner.rows[key] = {"launch_key": key, "pid": 9, "start_ticks": 90,
                           "state": "exited", "exit": {"exit_code": 0, "signal": None}}
        with pytest.raises(Conflict) as err:   # a row, with no live key and no event
            await resolve(jobs, job_id, False, "looked", "ops")
        assert err.value.data["evidence"]["row"]["pid"] == 9
        assert jobs.record(job_id).job.state is jm.State.RECOVERY_REQUIRED
    run(tmp_path, body, owner)


def test_a_stale_writer_loses_the_compare_and_set(tmp_path):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        rec, _ = jobs.submit("s/migrate", None, [])
        other = jobs.ledger.get(rec.id)            # what a second generation would hold
        jobs.apply(rec, jm.Withdraw())
        with pytest.raises(Conflict):
            jobs.apply(other, jm.Start(jobs.ledger.launch_prefix))
        assert state(gen, rec.id) is jm.State.WITHDRAWN and not job_launches(owner)
    run(tmp_path, body)


def test_a_stale_generation_cannot_start_a_record(tmp_path):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        owner.before = lambda m, p: (_ for _ in ()).throw(
            StaleEpoch("newer", {"current": 2})) if m == "launch" and \
            p["app"].startswith("job:") else None
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        assert rec.job.state is jm.State.STARTING and gen.api.jobs.fenced
        gen.api.jobs.tick()
        assert len(job_launches(owner)) == 1
    run(tmp_path, body)


def test_a_recorded_stop_that_was_not_sent_is_sent_again(tmp_path):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        rec, _ = jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        gen.api.pause()                        # a drain begins before the stop is sent
        jobs.stop(rec.id)
        await until(lambda: not jobs._stopping, "stop task ended")
        assert not owner.sent("stop") and rec.job.stop_reason is jm.StopReason.REQUESTED
        gen.api.unpause()                      # the drain was aborted
        jobs.tick()
        await until(lambda: bool(owner.sent("stop")), "stop sent after the drain")
        jobs.on_observation(owner.events[-1])
        assert (rec.job.state, rec.job.outcome) == (jm.State.FAILED, jm.Outcome.STOPPED)
    run(tmp_path, body)


def _leave_running(tmp_path: Path, owner: FakeOwner) -> dict[str, Any]:
    """A generation that started a job and went away while it ran: its id and key."""
    out: dict[str, Any] = {}

    async def first(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        out["id"], out["key"] = rec.id, rec.job.launch_key
    run(tmp_path, first, owner)
    return out


def test_a_running_record_whose_owner_is_gone_is_lost(tmp_path):
    owner = FakeOwner()
    out = _leave_running(tmp_path, owner)
    del owner.live[out["key"]]      # a replaced owner: its row still says running
    owner.events.clear()

    async def second(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        await resume(gen.api.jobs)
        rec = gen.api.jobs.record(out["id"])
        assert (rec.job.state, rec.job.outcome) == (jm.State.FAILED, jm.Outcome.LOST)
        assert rec.job.evidence["row"]["state"] == "running"  # type: ignore[index]
        assert out["key"] not in owner.live
    run(tmp_path, second, owner)


def test_a_running_record_the_owner_no_longer_knows_is_lost_not_launched_again(tmp_path):
    """Regression: with owner.db set aside for a new one (docs/reconcile.md) or the row
    pruned, the key was neither live nor in the ring, and the next generation asked the
    owner with `launch` for "its row": the owner started the job a second time, and the
    record, closed as lost, no longer tracked that process."""
    owner = FakeOwner()
    out = _leave_running(tmp_path, owner)
    launches = len(job_launches(owner))
    del owner.live[out["key"]], owner.rows[out["key"]]   # an owner that never saw it
    owner.events.clear()

    async def second(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        await resume(gen.api.jobs)
        rec = gen.api.jobs.record(out["id"])
        assert (rec.job.state, rec.job.outcome) == (jm.State.FAILED, jm.Outcome.LOST)
        assert "no row of its launch" in rec.job.evidence["reason"]  # type: ignore[index]
        assert len(job_launches(owner)) == launches   # nothing was started again
        assert not [k for k in owner.live if k.startswith("job:")]
    run(tmp_path, second, owner)


def test_closing_lets_a_start_in_flight_hear_its_answer(tmp_path):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        owner.hold("launch")
        rec, _ = jobs.submit("s/migrate", None, [])
        jobs.tick()
        await until(lambda: rec.job.state is jm.State.STARTING, "starting")
        asyncio.get_running_loop().call_soon(owner.release, "launch")
        await jobs.aclose()
        assert rec.job.state is jm.State.RUNNING       # not cut off mid-start
    run(tmp_path, body)


def test_an_exit_that_was_not_observed_is_found_by_the_audit(tmp_path):
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        first, _ = jobs.submit("s/pair", None, [])
        second, _ = jobs.submit("s/pair", None, [])
        jobs.tick()
        await until(lambda: not jobs._starting, "started")
        assert await audit(jobs) == []                      # both live: nothing to do
        owner.exit(first.job.launch_key, 4)  # type: ignore[arg-type]  # never delivered
        calls = len(owner.calls)
        assert await audit(jobs) == [first.id]
        assert (first.job.state, first.job.exit_code) == (jm.State.FAILED, 4)
        assert second.job.state is jm.State.RUNNING
        assert not [m for m, _, _ in owner.calls[calls:] if m == "launch"]
    run(tmp_path, body)


def test_a_template_with_a_user_is_launched_as_that_user(tmp_path):
    """The identity is pinned in the record at admission and reaches the owner's launch
    as an app's does, with the user's HOME and LOGNAME (the template's env wins)."""
    import pwd
    nobody = pwd.getpwnam("nobody")

    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        rec, _ = gen.api.jobs.submit("s/asnobody", "k", [])
        assert rec.to_wire()["identity"] == {"user": "nobody", "umask": 0o027}
        await started(gen, rec)
        (p,) = job_launches(owner)
        assert p["identity"] == {"user": "nobody", "umask": 0o027}
        assert (p["env"]["HOME"], p["env"]["LOGNAME"], p["env"]["USER"]) == \
            (nobody.pw_dir, "nobody", "mine")
        plain, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, plain)
        assert "identity" not in job_launches(owner)[1]
        assert plain.to_wire()["identity"] == {}
        # the same key once the template's user changed is the same request: its
        # record, as admitted (test_a_keyed_retry_after_the_template_changed_gets_...)
        gen.config = parse_config(CONFIG.replace('user = "nobody"', 'user = "root"'), "u")
        again, dup = gen.api.jobs.submit("s/asnobody", "k", [])
        assert dup and again.id == rec.id
        assert again.to_wire()["identity"] == {"user": "nobody", "umask": 0o027}
    run(tmp_path, body)


# ---- a failing tick hook, a reserved key -----------------------------------------------

def test_a_failing_hook_never_stops_the_start_loop(tmp_path, caplog):
    """A schedule (or retention) hook that raises every tick: logged once, and every
    admitted record still starts and later hooks still run."""
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        ran: list[float] = []

        def broken(now: float) -> None:
            raise Conflict("key 'schedule:s/x:2026-01-01T00:00:00Z' belongs to job 1")
        jobs.on_tick[:] = [broken, ran.append]
        rec, _ = jobs.submit("s/migrate", None, [])
        with caplog.at_level("ERROR", logger="tenure.jobs"):
            await started(gen, rec)
            jobs.tick()
        assert rec.job.state is jm.State.RUNNING
        assert len(ran) == 2
        said = [r for r in caplog.records if "broken" in r.getMessage()]
        assert len(said) == 1 and "belongs to job 1" in said[0].getMessage()
    run(tmp_path, body)


def test_a_client_key_in_the_schedules_form_is_refused(tmp_path):
    from backend.jobs.api import S_RUN, JobApi
    from protocol.errors import BadRequest
    from protocol.server import Call

    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        api = JobApi(gen.api.jobs)
        params = S_RUN.validate({"template": "s/migrate", "args": ["manual"],
                                 "key": "schedule:s/migrate:2026-03-02T10:05:00Z"})
        with pytest.raises(BadRequest) as err:
            await api.run(Call("job.run", params, None, 1, None))  # type: ignore[arg-type]
        assert err.value.data == {"field": "key"} and "reserved" in err.value.msg
        assert gen.api.jobs.ledger.records() == []
        ok = S_RUN.validate({"template": "s/migrate", "key": "nightly-schedule:1"})
        assert (await api.run(Call("job.run", ok, None, 2, None)))["job"]["id"] == 1  # type: ignore[arg-type]
    run(tmp_path, body)


def test_args_over_the_limits_are_refused_naming_the_limits_and_the_argument():
    """Was: `must be at most 256 strings without NUL` for one argument too long."""
    from backend.jobs.api import ARG_CHARS_MAX, ARGS_MAX, S_RUN
    from protocol.errors import BadRequest
    limits = (f"at most {ARGS_MAX} arguments of at most {ARG_CHARS_MAX} characters each, "
              "without NUL")
    for given, why in ((["ok", "x" * (ARG_CHARS_MAX + 1)], "argument 2 has 4097 characters"),
                       (["a"] * (ARGS_MAX + 1), "257 given"),
                       (["a\0b"], "argument 1 contains NUL")):
        with pytest.raises(BadRequest) as err:
            S_RUN.validate({"template": "s/migrate", "args": given})
        assert err.value.msg == f"params.args must be {limits}: {why}"
    S_RUN.validate({"template": "s/migrate", "args": ["x" * ARG_CHARS_MAX] * ARGS_MAX})


def test_a_state_filter_that_is_empty_or_unknown_is_refused_naming_the_states():
    from backend.jobs.api import S_LIST
    from protocol.errors import BadRequest
    for state, bad in (("", "''"), ("running,nosuch", "'nosuch'")):
        with pytest.raises(BadRequest, match=f"admitted, starting, running.*: {bad} is not"):
            S_LIST.validate({"state": state})
    assert S_LIST.validate({"state": "running,failed"})["state"] == "running,failed"


def test_a_list_cursor_past_what_sqlite_holds_is_refused():
    """`before` of 2**63 reached SQLite, which raised OverflowError: INTERNAL."""
    from backend.jobs.api import S_LIST
    from protocol.errors import BadRequest
    with pytest.raises(BadRequest, match="before must be <= "):
        S_LIST.validate({"before": 2**63})
    assert S_LIST.validate({"before": 2**63 - 1})["before"] == 2**63 - 1


def test_a_list_filter_naming_nothing_is_not_found(tmp_path):
    """Was: `job list nosuch` printed `no jobs` and exited 0."""
    from backend.jobs.api import S_LIST, JobApi
    from protocol.errors import NotFound
    from protocol.server import Call

    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        api = JobApi(gen.api.jobs)

        async def listed(**params: Any) -> list[int]:
            call = Call("job.list", S_LIST.validate(params), None, 1, None)
            return [j["id"] for j in (await api.list(call))["jobs"]]  # type: ignore[arg-type]
        for params in ({"stack": "nosuch"}, {"template": "s/nosuch"},
                       {"template": "nosuch/migrate"}):
            with pytest.raises(NotFound, match="names no"):
                await listed(**params)
        assert await listed(stack="s") == await listed(template="s/migrate") == []
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        assert await listed(template="s/migrate", state="failed") == []
        gen.config = parse_config(CONFIG.replace("[stacks.s.jobs.migrate]",
                                                 "[stacks.s.jobs.other]"), "u")
        assert await listed(template="s/migrate") == [rec.id]   # its records name it
    run(tmp_path, body)


def test_a_list_of_records_with_large_arguments_stops_within_a_frame(tmp_path):
    """Five records of 256 arguments of 4 KiB filled more than a frame: job.list
    answered INTERNAL. It stops at LIST_BYTES and says there is more."""
    import msgpack

    from backend.jobs.api import LIST_BYTES, S_LIST, JobApi
    from protocol.framing import DEFAULT_MAX_FRAME
    from protocol.server import Call

    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        api = JobApi(gen.api.jobs)
        big = ["x" * 4096] * 256
        ids = [gen.api.jobs.submit("s/migrate", f"k{i}", big)[0].id for i in range(5)]
        call = Call("job.list", S_LIST.validate({}), None, 1, None)
        answer = await api.list(call)  # type: ignore[arg-type]
        assert answer["more"] is True and len(msgpack.packb(answer)) < DEFAULT_MAX_FRAME
        assert [j["id"] for j in answer["jobs"]] == ids[::-1][:len(answer["jobs"])]
        assert 1 <= len(answer["jobs"]) < 5
        assert len(msgpack.packb(answer["jobs"][:-1])) <= LIST_BYTES
        small = Call("job.list", S_LIST.validate({"limit": 1}), None, 1, None)
        assert (await api.list(small))["more"] is False  # type: ignore[arg-type]
    run(tmp_path, body)


# ---- times of exits heard late -----------------------------------------------------------

def test_an_exit_heard_by_a_later_generation_ends_the_record_at_the_exit(tmp_path):
    """The backend died while the job ran; it exited 2 s after its start; the next
    generation came 20 s later: ended and duration are the exit's, not the takeover's."""
    owner = FakeOwner()
    out: dict[str, Any] = {}

    async def first(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        ev = owner.exit(rec.job.launch_key, 0)  # type: ignore[arg-type]  # not delivered
        ev["at"] = clock.now + 2
        out.update(id=rec.id, started=rec.job.started_at)
    run(tmp_path, first, owner)

    async def second(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        clock.now += 20
        await resume(gen.api.jobs)
        wire = gen.api.jobs.record(out["id"]).to_wire()
        assert (wire["state"], wire["started_at"]) == ("succeeded", out["started"])
        assert (wire["ended_at"], wire["duration"]) == (out["started"] + 2, 2.0)
    run(tmp_path, second, owner)


def test_a_start_and_exit_settled_from_evidence_keep_the_owners_times(tmp_path):
    owner = FakeOwner()
    job_id, key = _leave_starting(tmp_path, owner, True, 0)
    launched, ended = (e for e in owner.events if e["launch_key"] == key)
    launched["at"], ended["at"] = 999_000.0, 999_003.5

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        await resume(gen.api.jobs)
        wire = gen.api.jobs.record(job_id).to_wire()
        assert (wire["state"], wire["started_at"], wire["ended_at"], wire["duration"]) == \
            ("succeeded", 999_000.0, 999_003.5, 3.5)
    run(tmp_path, body, owner)


def test_an_exit_read_back_from_the_owners_row_keeps_its_time(tmp_path):
    owner = FakeOwner()
    out: dict[str, Any] = {}

    async def first(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        owner.exit(rec.job.launch_key, None, 9)  # type: ignore[arg-type]
        owner.events.clear()                     # the ring moved on: the row says it
        owner.rows[rec.job.launch_key]["ended_at"] = clock.now + 4  # type: ignore[index]
        out.update(id=rec.id, started=rec.job.started_at)
    run(tmp_path, first, owner)

    async def second(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        clock.now += 60
        await resume(gen.api.jobs)
        rec = gen.api.jobs.record(out["id"])
        assert (rec.job.state, rec.job.ended_at) == (jm.State.FAILED, out["started"] + 4)
    run(tmp_path, second, owner)


def test_a_start_found_late_is_stopped_by_its_timeout_counted_from_the_start(tmp_path):
    """A job whose launch the dead generation never heard of, still running when the
    next one settles it 40 s later: its 30 s timeout has passed, so it is stopped."""
    owner = FakeOwner()
    job_id, key = _leave_starting(tmp_path, owner, True, None)
    owner.live[key]["started_at"] = 1_000_000.0

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        clock.now += 40
        await resume(gen.api.jobs)
        rec = gen.api.jobs.record(job_id)
        assert (rec.job.state, rec.job.started_at) == (jm.State.RUNNING, 1_000_000.0)
        gen.api.jobs.tick()
        await until(lambda: bool(owner.sent("stop")), "stopped by its timeout")
        gen.api.jobs.on_observation(owner.events[-1])
        assert (rec.job.state, rec.job.outcome) == (jm.State.TIMED_OUT, jm.Outcome.TIMEOUT)
    run(tmp_path, body, owner)


# ---- resolve, again ----------------------------------------------------------------------

def test_the_same_resolve_again_answers_as_the_first_did(tmp_path):
    """A retry after a lost answer: the same decision on the same record is answered
    with the record and changes nothing; the other decision stays a CONFLICT."""
    owner = FakeOwner()
    job_id, _ = _leave_starting(tmp_path, owner, False, None)

    async def body(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        await resume(jobs)
        first = (await resolve(jobs, job_id, False, "not in ps", "ops")).to_wire()
        again = (await resolve(jobs, job_id, False, "not in ps", "ops")).to_wire()
        assert again == first and again["state"] == "admitted"
        assert [h["event"] for h in jobs.ledger.history(job_id)].count("Resolve") == 1
        with pytest.raises(Conflict, match="only a recovery_required record"):
            await resolve(jobs, job_id, True, "", "ops")
    run(tmp_path, body, owner)


def _answer_uncertain(owner: FakeOwner) -> None:
    """The owner started the job's process but could not write its running row (a
    full disk): its launch answer says ``uncertain``, with the pid it watches."""
    launch = owner._launch

    def uncertain(p: dict[str, Any]) -> dict[str, Any]:
        row = launch(p)
        if not p["launch_key"].startswith("job:"):
            return row
        return {**row, "state": "uncertain",
                "error": {"code": "STORAGE_FAILED", "msg": "database or disk is full"}}
    owner._launch = uncertain   # type: ignore[method-assign]


def test_a_launch_the_owner_could_not_write_down_runs_and_keeps_its_timeout(tmp_path):
    """Was: the answer ``uncertain`` (started, its row not written) ended the record
    failed/lost while its process ran on: no timeout, no `job stop`, and
    max_concurrent let a second one start beside it."""
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        _answer_uncertain(owner)
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        assert rec.job.state is jm.State.RUNNING and rec.job.pid is not None
        clock.mono_now += 30
        gen.api.jobs.tick()
        await until(lambda: bool(owner.sent("stop")), "the timeout's stop sent")
        gen.api.jobs.on_observation(owner.events[-1])
        assert (rec.job.state, rec.job.outcome) == (jm.State.TIMED_OUT, jm.Outcome.TIMEOUT)
    run(tmp_path, body)


def test_an_uncertain_row_that_shows_an_exit_ends_the_record_with_it(tmp_path):
    """A running record whose process ended while no backend watched, and whose row the
    owner could not write since: its in-memory row says ``uncertain`` with the exit,
    which settles the record (it was read as lost)."""
    owner = FakeOwner()
    out: dict[str, Any] = {}

    async def first(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        key = str(rec.job.launch_key)
        owner.exit(key, 3)
        owner.rows[key]["state"] = "uncertain"   # the exit could not be written
        owner.events.clear()                     # as if the ring had moved on
        out["id"] = rec.id
    run(tmp_path, first, owner)

    async def second(gen: Generation, o: FakeOwner, clock: FakeClock) -> None:
        await resume(gen.api.jobs)
        rec = gen.api.jobs.record(out["id"])
        assert (rec.job.state, rec.job.outcome, rec.job.exit_code) == \
            (jm.State.FAILED, jm.Outcome.EXIT_CODE, 3)
    run(tmp_path, second, owner)


def test_a_launch_the_owner_could_not_record_fails_the_job_at_once(tmp_path):
    """STORAGE_FAILED from a launch means nothing was started (the owner could not write
    its starting row). Was: counted as an unanswered try, five of them made the record
    recovery_required, for the operator, with evidence saying the owner did not
    answer."""
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        def full(method: str, params: dict[str, Any]) -> None:
            if method == "launch" and params["app"].startswith("job:"):
                raise StorageFailed("s/x: the launch could not be recorded (database or "
                                    "disk is full); nothing was started")
        owner.before = full
        rec, _ = gen.api.jobs.submit("s/migrate", None, [])
        await started(gen, rec)
        assert len(job_launches(owner)) == 1
        assert (rec.job.state, rec.job.outcome) == (jm.State.FAILED,
                                                    jm.Outcome.LAUNCH_FAILED)
        refused = rec.job.evidence["launch_refused"]   # type: ignore[index]
        assert refused["code"] == "STORAGE_FAILED" and "nothing was started" in refused["msg"]
    run(tmp_path, body)


def test_a_keyed_retry_after_the_template_changed_gets_its_record(tmp_path):
    """docs/jobs.md: a submission repeated with the same key gets the same record. Was:
    the template's command changed (or it was taken out of the config) between the two,
    and the retry of a lost answer was refused CONFLICT (or NOT_FOUND), which a script
    reads as 'not admitted'. The same template with other arguments is still refused."""
    async def body(gen: Generation, owner: FakeOwner, clock: FakeClock) -> None:
        jobs = gen.api.jobs
        first, dup = jobs.submit("s/migrate", "rel-1", ["--all"])
        assert not dup
        gen.config = parse_config(CONFIG.replace('command = ["migrate"]',
                                                 'command = ["migrate2"]'), "t.toml")
        again, dup = jobs.submit("s/migrate", "rel-1", ["--all"])
        assert dup and again.id == first.id and again.spec["argv"] == ["migrate", "--all"]
        gen.config = parse_config('[stacks.s.apps.db]\ncommand = ["x"]\n', "t.toml")
        again, dup = jobs.submit("s/migrate", "rel-1", ["--all"])
        assert dup and again.id == first.id
        gen.config = parse_config(CONFIG, "t.toml")
        with pytest.raises(Conflict):
            jobs.submit("s/migrate", "rel-1", ["--some"])
        with pytest.raises(Conflict):
            jobs.submit("s/pair", "rel-1", ["--all"])
        assert [r.id for r in jobs.ledger.records()] == [first.id]
    run(tmp_path, body)
