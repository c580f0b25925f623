"""The drain barrier of a backend generation, with a fake owner whose stop can be held
mid-way (a deliberately slow step): a drain lets the running step finish before it
freezes, so no instance is left stopped; an operation waits at its next step boundary
and continues after resume; a checkpoint is refused while anything still runs.
Nothing sleeps (the loop only yields)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from backend.instance import State
from backend.testing import FakeOwner, api_call, fake_generation, until
from protocol.envelope import Event
from protocol.errors import OperationInProgress, ShuttingDown

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'
TWO = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\ninstances = 2\nenv = { V = "1" }\n'


call = api_call


def ready(gen, *keys: str) -> Callable[[], bool]:
    return lambda: all(k in gen.sup.instances and gen.sup.instances[k].state is State.READY
                       for k in keys)


def test_drain_lets_a_restart_step_finish_so_the_app_is_not_left_stopped(tmp_path: Path):
    async def main() -> None:
        owner = FakeOwner()
        gen = fake_generation(tmp_path, owner, ONE)
        try:
            await until(ready(gen, "s/a/0"), "first start")
            owner.hold("stop")  # the app takes its time to stop
            restart = asyncio.create_task(gen.api.restart(call("restart", target="s/a",
                                                               timeout=30.0)))
            await until(lambda: bool(owner.sent("stop")), "stop sent")
            drain = asyncio.create_task(gen.drain(30.0))
            await until(lambda: gen.api.gate.paused, "drain began")
            assert not drain.done()
            with pytest.raises(OperationInProgress) as refused:
                gen.checkpoint(str(tmp_path / "early.json"))
            assert refused.value.data["steps"] == ["restart s/a/0"]
            assert not (tmp_path / "early.json").exists()

            owner.release("stop")
            drained = await drain
            assert (drained["drained"], drained["in_flight"], drained["steps"]) == \
                (True, 0, [])
            assert drained["waited_for"] == ["restart s/a/0"]
            inst = gen.sup.instances["s/a/0"]
            assert (inst.state, inst.generation) == (State.READY, 2)
            assert [p["launch_key"] for p in owner.sent("launch")] == ["s/a/0/1", "s/a/0/2"]
            # The request sees the restart done, or (when the drain is seen first) says
            # which instances it restarted: here all of them, either way.
            try:
                answer = await restart
            except ShuttingDown as cut:
                assert (cut.data["restarted"], cut.data["remaining"]) == (["s/a/0"], [])
            else:   # was a SHUTTING_DOWN error saying "not restarted none ... run the
                # command again", which would restart it twice
                assert answer in ({"settled": True, "instances": {"s/a/0": "ready"}},
                                  {"settled": False, "instances": answer["instances"],
                                   "handed_over": True}), answer
            cp = gen.checkpoint(str(tmp_path / "cp.json"))
            assert cp["launches"] == 1
            body = json.loads((tmp_path / "cp.json").read_text())
            assert [r["launch_key"] for r in body["inventory"]] == ["s/a/0/2"]
        finally:
            await gen.close()
    asyncio.run(main())


def test_an_operation_waits_at_its_step_boundary_and_continues_after_resume(tmp_path: Path):
    async def main() -> None:
        owner = FakeOwner()
        gen = fake_generation(tmp_path, owner, TWO)
        try:
            await until(ready(gen, "s/a/0", "s/a/1"), "first start")
            plan = await gen.api.plan(call("plan", config_text=TWO.replace('"1"', '"2"'),
                                           source="v2.toml"))
            owner.hold("stop")
            op = await gen.api.apply(call("apply", plan=plan["id"], request_id=None))
            await until(lambda: bool(owner.sent("stop")), "step 0 stopping")
            drain = asyncio.create_task(gen.drain(30.0))
            await until(lambda: gen.api.gate.paused, "drain began")
            assert not drain.done()
            owner.release("stop")
            assert (await drain)["drained"] is True

            row = gen.store.operation(op["id"])
            assert (row["step"], row["outcome"]) == (1, None)   # step 0 done, durable
            assert [p["launch_key"] for p in owner.sent("stop")] == ["s/a/0/1"]
            assert gen.sup.instances["s/a/0"].generation == 2
            assert gen.sup.instances["s/a/0"].state is State.READY
            cp = gen.checkpoint(str(tmp_path / "cp.json"))
            assert cp["launches"] == 2
            assert json.loads((tmp_path / "cp.json").read_text())["operations"] == [op["id"]]

            gen.resume()
            await until(lambda: gen.store.operation(op["id"])["outcome"] is not None,
                        "operation ended")
            assert gen.store.operation(op["id"])["outcome"] == "success"
            assert [gen.sup.instances[f"s/a/{i}"].generation for i in (0, 1)] == [2, 2]
            assert ready(gen, "s/a/0", "s/a/1")()
        finally:
            await gen.close()
    asyncio.run(main())


def test_a_drain_that_times_out_does_not_freeze_and_resume_finishes_the_step(
        tmp_path: Path):
    async def main() -> None:
        owner = FakeOwner()
        gen = fake_generation(tmp_path, owner, ONE)
        try:
            await until(ready(gen, "s/a/0"), "first start")
            owner.hold("stop")
            restart = asyncio.create_task(gen.api.restart(call("restart", target="s/a",
                                                               timeout=30.0)))
            await until(lambda: bool(owner.sent("stop")), "stop sent")
            result = await gen.drain(0.0)
            assert (result["drained"], result["in_flight"], result["steps"]) == \
                (False, 1, ["restart s/a/0"])
            assert gen.sup.frozen is False
            with pytest.raises(OperationInProgress):
                gen.checkpoint(str(tmp_path / "cp.json"))
            gen.resume()
            owner.release("stop")
            assert await restart == {"settled": True, "instances": {"s/a/0": "ready"}}
            assert gen.sup.instances["s/a/0"].generation == 2
        finally:
            await gen.close()
    asyncio.run(main())


def test_a_checkpoint_without_a_drain_is_refused(tmp_path: Path):
    async def main() -> None:
        gen = fake_generation(tmp_path, FakeOwner(), ONE)
        try:
            await until(ready(gen, "s/a/0"), "first start")
            with pytest.raises(OperationInProgress) as refused:
                gen.checkpoint(str(tmp_path / "cp.json"))
            assert refused.value.data == {"steps": [], "in_flight": 0, "frozen": False}
            assert not (tmp_path / "cp.json").exists()
        finally:
            await gen.close()
    asyncio.run(main())


def test_a_start_wanted_while_frozen_is_refused_not_dropped(tmp_path: Path):
    async def main() -> None:
        gen = fake_generation(tmp_path, FakeOwner(), ONE)
        try:
            await until(ready(gen, "s/a/0"), "first start")
            assert (await gen.drain(30.0))["drained"] is True
            with pytest.raises(ShuttingDown):
                gen.sup.ensure(gen.config.apps()[0], 0, False)
        finally:
            await gen.close()
    asyncio.run(main())


class _EventfulOwner(FakeOwner):
    """The fake owner, also pushing observation events like the real subscription."""

    connected = True

    def __init__(self) -> None:
        super().__init__()
        self.pushed: asyncio.Queue[Event] = asyncio.Queue()

    async def next_event(self, timeout: float) -> Event | None:
        try:
            return await asyncio.wait_for(self.pushed.get(), timeout)
        except TimeoutError:
            return None


def test_an_event_that_arrives_as_a_drain_freezes_is_handled_after_resume(tmp_path: Path):
    """Regression: the reader dropped the one event it held when a drain froze it ("the
    next generation re-reads it"); after an aborted drain nobody did, and the app kept a
    dead pid as running."""
    async def main() -> None:
        owner = _EventfulOwner()
        gen = fake_generation(tmp_path, owner, ONE)
        reader = asyncio.create_task(gen._read_observations())
        try:
            await until(ready(gen, "s/a/0"), "first start")
            inst = gen.sup.instances["s/a/0"]
            await until(lambda: True, "the reader waits for an event", turns=5)
            gen._thawed.clear()                     # a drain freezes meanwhile
            owner.pushed.put_nowait(Event("observations", 7, {
                "kind": "exit", "launch_key": inst.launch_key, "exit_code": 1,
                "signal": None}))
            for _ in range(50):
                await asyncio.sleep(0)
            assert gen.cursor < 7 and inst.state is State.READY   # held, not handled
            gen._thawed.set()                       # the drain was aborted: resume
            await until(lambda: gen.cursor == 7, "the held event handled")
            assert gen.sup.instances["s/a/0"].state is not State.READY
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await gen.close()
    asyncio.run(main())


def test_a_restart_whose_every_instance_started_again_is_no_error_at_a_drain(
        tmp_path: Path):
    """Was SHUTTING_DOWN: 'restarted s/a/0; not restarted none ... run the command again
    for the rest', an error for a restart that was done, inviting a second one."""
    delayed = ONE + 'ready = { kind = "delay", delay = 3600 }\n'

    async def main() -> None:
        owner = FakeOwner()
        gen = fake_generation(tmp_path, owner, delayed)
        try:
            await until(lambda: bool(owner.sent("launch")), "first start")
            restart = asyncio.create_task(gen.api.restart(call("restart", target="s/a",
                                                               timeout=30.0)))
            await until(lambda: len(owner.sent("launch")) == 2, "started again")
            drain = asyncio.create_task(gen.drain(30.0))
            answer = await restart
            assert answer == {"settled": False, "instances": {"s/a/0": "running"},
                              "handed_over": True}, answer
            assert (await drain)["drained"]
        finally:
            await gen.close()
    asyncio.run(main())
