"""Instances whose start waits for a config queued before the generation began
(Supervisor.deferred, backend.generation): unsaved while they wait, planned as not
running, decided by any event fed to them, and started as they were when the queued
config leaves them alone. Fake owner, real SQLite; the real path is in
tests/integration/workflow/test_up_new_config_cold.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from backend.adopt import relaunch_lost
from backend.certify import persist
from backend.instance import State, StopRequested
from backend.testing import FakeOwner, run_generation, until

TWO = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\ninstances = 2\n'
       '[stacks.t.apps.b]\ncommand = ["sleep", "1000"]\n')


def _defer_all(gen: Any) -> list[str]:
    """What a generation recovered after `tenure down` does when a config is queued:
    every launch is gone, and each instance waits."""
    persist(gen)
    return relaunch_lost(gen.sup, set(), set(), defer=True)


def test_deferred_instances_are_not_saved_and_keep_the_generation_unquiet(tmp_path: Path
                                                                          ) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        lost = _defer_all(gen)
        assert sorted(lost) == sorted(gen.sup.deferred) == ["s/a/0", "s/a/1", "t/b/0"]
        assert all(i.state is State.STOPPED for i in gen.sup.instances.values())
        assert not gen.sup.quiet()
        persist(gen)   # backend.db keeps them as they were: a crash decides them again
        assert {k: v["state"] for k, v in gen.store.instances().items()} == \
            {"s/a/0": "ready", "s/a/1": "ready", "t/b/0": "ready"}
        assert gen.sup.dirty >= gen.sup.deferred
    run_generation(tmp_path, TWO, body)


def test_a_plan_starts_deferred_instances_rather_than_keeping_them_stopped(tmp_path: Path
                                                                          ) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        _defer_all(gen)
        new = TWO.replace('"1000"]\ninstances = 2', '"999"]\ninstances = 2')
        plan = await gen.api.plan_text(new, "/new.toml")
        assert {(c["app"], c["action"]) for c in plan["changes"]} == \
            {("s/a", "start"), ("t/b", "start")}, plan["changes"]
        assert not any(c.get("stay_stopped") for c in plan["changes"])
    run_generation(tmp_path, TWO, body)


def test_release_starts_only_what_nothing_decided(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        _defer_all(gen)
        gen.sup.feed("s/a/1", StopRequested())   # an operator's stop decides it
        assert gen.sup.deferred == {"s/a/0", "t/b/0"}
        started = gen.sup.release_deferred({"t"}, "test")   # stack t is stopped
        assert started == ["s/a/0"] and gen.sup.deferred == set()
        await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "s/a/0 up")
        assert gen.sup.instances["s/a/1"].state is State.STOPPED
        assert gen.sup.instances["t/b/0"].state is State.STOPPED
        persist(gen)
        assert gen.store.instances()["s/a/0"]["state"] == "ready"
    run_generation(tmp_path, TWO, body)


def test_deferred_instances_wait_for_the_queued_configs_operation(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        _defer_all(gen)
        gen._queue_taken("busy", None)   # an operation open before it: still waiting
        assert gen.sup.deferred
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        gen.api.ops.tasks["op-q"] = ended
        gen._queue_taken("admitted", "op-q")
        assert gen.sup.deferred   # not while its operation runs
        gen._queue_taken(None, None)   # the next tick finds nothing queued
        assert gen.sup.deferred
        ended.set_result(None)
        await until(lambda: not gen.sup.deferred, "released once it ended")
        del gen.api.ops.tasks["op-q"]
        await until(lambda: all(i.state is State.READY
                                for i in gen.sup.instances.values()), "all up again")
    run_generation(tmp_path, TWO, body)


def test_a_queue_that_is_rejected_or_gone_releases_at_once(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        for outcome in ("rejected", "no-change", None):
            _defer_all(gen)
            gen._queue_taken(outcome, None)
            assert not gen.sup.deferred, outcome
            await until(lambda: all(i.state is State.READY
                                    for i in gen.sup.instances.values()), "all up")
    run_generation(tmp_path, TWO, body)
