"""The backend's index of launch keys (which instance or job an owner event is about)
holds the current launch of each, not every launch ever made: an app restarted every
10 s, or a job scheduled every minute, grew a generation's memory by an entry per run
for as long as it served. The events of an older launch are ignored either way. A
removed instance leaves nothing behind either (an app renamed at every deploy)."""

from __future__ import annotations

from pathlib import Path

from backend.events import EventLog
from backend.generation import Generation
from backend.instance import State
from backend.jobs import machine as jm
from backend.testing import FakeOwner, api_call, run_generation, until

APPS = '[stacks.s.apps.a]\ncommand = ["srv"]\nrestart = "always"\ninstances = 2\n' \
       '[stacks.s.apps.a.backoff]\ninitial = 0\nmax = 0\n' \
       '[stacks.s.apps.a.start_limit]\nburst = 1000\ninterval = 1\n' \
       '[stacks.s.jobs.j]\ncommand = ["once"]\n'


def test_an_app_restarted_many_times_keeps_one_key_per_instance(tmp_path: Path) -> None:
    async def body(gen: Generation, owner: FakeOwner) -> None:
        sup = gen.sup
        inst = sup.instances["s/a/0"]
        for n in range(50):
            await until(lambda: inst.state is State.READY and inst.launch_key in owner.live,
                        f"run {n} up")
            old = inst.launch_key
            sup.on_observation(owner.exit(old, 0))
            await until(lambda old=old: inst.launch_key != old, f"run {n} relaunched")
        await until(lambda: inst.state is State.READY, "last run up")
        assert inst.generation > 50
        assert sorted(sup.by_launch) == sorted(i.launch_key for i in sup.instances.values())
        sup.on_observation(owner.exit(inst.launch_key, 0))   # the index still serves
        await until(lambda: inst.restarts > 50, "the last exit taken up")

    run_generation(tmp_path, APPS, body)


def test_a_job_run_many_times_keeps_no_key_once_ended(tmp_path: Path) -> None:
    async def body(gen: Generation, owner: FakeOwner) -> None:
        jobs = gen.api.jobs
        for _ in range(20):
            rec, _ = jobs.submit("s/j", None, [])
            jobs.tick()
            await until(lambda rec=rec: rec.job.state is jm.State.RUNNING, "job running")
            assert jobs.by_launch == {rec.job.launch_key: rec.id}
            jobs.on_observation(owner.exit(rec.job.launch_key, 0))
            assert rec.job.state is jm.State.SUCCEEDED
        assert jobs.by_launch == {}

    run_generation(tmp_path, APPS, body)


def test_a_removed_instance_leaves_nothing_in_memory(tmp_path: Path) -> None:
    async def body(gen: Generation, owner: FakeOwner) -> None:
        sup = gen.sup
        sup.events = EventLog(gen.store, gen.activation)
        inst = sup.instances["s/a/1"]
        sup.told_status(inst.launch_key, "serving")
        sup.on_observation(owner.exit(inst.launch_key, 0))
        await until(lambda: inst.state is State.READY and inst.launch_key in owner.live,
                    "relaunched")
        sup.told_status(inst.launch_key, "serving")
        await gen.api.stop(api_call("stop", target="s/a/1", timeout=5.0))
        assert "s/a/1" in sup.events.exits_told and "s/a/1" in sup.starts._stops_fed
        sup.forget("s/a/1")
        assert inst.launch_key not in sup.by_launch
        assert inst.launch_key not in sup.status_text
        assert "s/a/1" not in sup.events.exits_told and "s/a/1" not in sup.starts._stops_fed

    run_generation(tmp_path, APPS, body)
