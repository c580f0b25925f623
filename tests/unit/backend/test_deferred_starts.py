"""Instances whose start waits for a config queued before the generation began
(Supervisor.deferred, backend.generation): unsaved while they wait, planned as not
running, decided by any event fed to them, and started as they were when the queued
config leaves them alone. Fake owner, real SQLite; the real path is in
tests/integration/workflow/test_up_new_config_cold.py."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from backend import queuefile, spool
from backend.adopt import adopt_checkpoint, defer_backoffs, relaunch_lost
from backend.certify import persist
from backend.config import parse_config
from backend.instance import Exited, State, StopRequested
from backend.spool_api import queue_result
from backend.supervisor import Supervisor
from backend.testing import FakeOwner, run_generation, until
from protocol.handover import read_checkpoint

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
        started = gen.sup.release_deferred(gen.config, {"t"}, "test")   # t is stopped
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


def test_release_starts_an_instance_on_the_configured_definition(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        _defer_all(gen)
        changed = parse_config(TWO.replace('"1000"]\ninstances = 2', '"999"]\ninstances = 2'),
                               "/new.toml")
        gen.config = changed   # the generation releases them on its (desired) config
        assert gen.sup.release_deferred(changed, set(), "test") == ["s/a/0", "s/a/1", "t/b/0"]
        assert gen.sup.deferred == set()
        await until(lambda: gen.sup.instances["s/a/0"].state is State.READY, "s/a/0 up")
        launched = [c for c in owner.sent("launch") if c["instance"] == 0
                    and c["app"] == "a"]
        assert launched[-1]["argv"] == ["sleep", "999"], launched[-1]   # not the old one
    run_generation(tmp_path, TWO, body)


def test_a_cancelled_operation_or_a_newer_queued_config_releases_nothing(tmp_path: Path
                                                                        ) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        _defer_all(gen)
        loop = asyncio.get_running_loop()
        cancelled: asyncio.Future[None] = loop.create_future()
        gen.api.ops.tasks["op-c"] = cancelled
        gen._queue_taken("admitted", "op-c")
        gen.closing = True   # `tenure down` closing this generation cancels it
        cancelled.cancel()
        await asyncio.sleep(0)
        assert gen.sup.deferred
        del gen.api.ops.tasks["op-c"]
        gen._deferred_for, gen.closing = None, False
        gen.spool = spool.Spool(str(tmp_path / "queued-config.json"), None)
        queuefile.queue(gen.spool.queued, "newer", "/newer.toml")
        for outcome in ("rejected", "no-change", None):   # the older one, decided
            gen._queue_taken(outcome, None)
            assert gen.sup.deferred, outcome   # the newer one decides them
        ended: asyncio.Future[None] = loop.create_future()
        gen.api.ops.tasks["op-n"] = ended
        os.unlink(gen.spool.queued)
        gen._queue_taken("admitted", "op-n")
        queuefile.queue(gen.spool.queued, "newest", "/newest.toml")
        ended.set_result(None)
        await asyncio.sleep(0)
        assert gen.sup.deferred
        del gen.api.ops.tasks["op-n"]
    run_generation(tmp_path, TWO, body)


def test_an_instance_in_backoff_is_deferred_too(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        gen.sup.feed("t/b/0", Exited(3, None))   # restart = "always": it backs off
        assert gen.sup.instances["t/b/0"].state is State.BACKOFF
        assert defer_backoffs(gen.sup, {"s"}) == ["t/b/0"]
        assert gen.sup.deferred == {"t/b/0"}
        assert gen.sup.instances["t/b/0"].state is State.STOPPED
        assert not gen.sup.instances["t/b/0"].timers
    run_generation(tmp_path, TWO, body)


def test_queue_show_names_the_operation_a_queued_config_joined(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        plan = await gen.api.plan_text(TWO.replace("1000", "998"), "/x.toml")
        op = gen.api.admit(plan["id"], None)   # an apply of that config, still open
        os.makedirs(os.path.dirname(gen.layout.queued_config), exist_ok=True)
        gen.spool = spool.Spool(gen.layout.queued_config, gen.api.apply_text)
        rid = queuefile.queue(gen.spool.queued, TWO.replace("1000", "998"), "/x.toml")[
            "request_id"]
        assert queue_result(gen, rid) == {"state": "waiting"}
        assert await gen.spool.take() == "admitted" and gen.spool.operation == op["id"]
        shown = queue_result(gen, rid)
        assert shown["state"] == "admitted" and shown["operation"]["id"] == op["id"]
        assert shown["operation"]["joined"] is True
        await until(lambda: gen.store.operation(op["id"])["outcome"] is not None, "op end",
                    turns=5000)
    run_generation(tmp_path, TWO, body)


def test_a_drain_begun_while_a_queued_config_is_planned_admits_nothing(tmp_path: Path
                                                                      ) -> None:
    """The spool ticks only while no drain runs, but planning asks the owner: a drain
    that began meanwhile (its checkpoint may be taken) must not meet an operation
    admitted behind it. The queue stays taken, for the generation that serves next."""
    async def body(gen: Any, owner: FakeOwner) -> None:
        os.makedirs(os.path.dirname(gen.layout.queued_config), exist_ok=True)
        gen.spool = spool.Spool(gen.layout.queued_config, gen.api.apply_text)
        queuefile.queue(gen.spool.queued, TWO.replace("1000", "998"), "/x.toml")
        owner.hold("status")
        take = asyncio.create_task(gen.spool.take())
        await until(lambda: bool(owner.sent("status")), "planning asks the owner")
        gen.api.pause()   # a handoff's drain
        owner.release("status")
        assert await take == "busy"
        assert gen.store.operations(open_only=False) == []
        assert os.path.exists(gen.spool.taken)
    run_generation(tmp_path, TWO, body)


def test_an_abandoned_queued_operation_starts_what_it_did_not_reach(tmp_path: Path
                                                                    ) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        _defer_all(gen)
        gen.config = parse_config(TWO.replace('"1000"]\ninstances = 2',
                                              '"999"]\ninstances = 2'), "/new.toml")
        op: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        gen.api.ops.tasks["op-a"] = op
        gen._queue_taken("admitted", "op-a")
        op.cancel()   # `tenure op abandon`: this generation goes on
        await until(lambda: not gen.sup.deferred, "decided")
        del gen.api.ops.tasks["op-a"]
        await until(lambda: all(i.state is State.READY
                                for i in gen.sup.instances.values()), "all up")
        assert list(gen.sup.instances["s/a/0"].app.command) == ["sleep", "999"]
    run_generation(tmp_path, TWO, body)


def test_a_handoff_hands_over_what_waits(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        _defer_all(gen)
        gen.sup.feed("s/a/1", StopRequested())   # decided: not handed over as waiting
        before = len(owner.sent("launch"))
        assert (await gen.drain(30.0))["drained"] is True
        path = str(tmp_path / "act.checkpoint.json")
        gen.checkpoint(path)
        assert len(owner.sent("launch")) == before   # frozen: nothing started
        cp = read_checkpoint(path)
        assert cp["deferred"] == ["s/a/0", "t/b/0"]
        successor = Supervisor(owner, gen.epoch)
        adopt_checkpoint(successor, gen.config, cp, [], 0.0)
        assert successor.deferred == {"s/a/0", "t/b/0"}
    run_generation(tmp_path, TWO, body)
