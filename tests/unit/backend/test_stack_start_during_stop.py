"""A `tenure stack start` asked while a `tenure stack stop` still stops slow instances:
the latest command wins. Before, the start set the intent back to `running` but fed a
Start to instances still stopping, which they ignore: they stayed stopped for good
(restart = "always" notwithstanding, `tenure plan` saw nothing to do), the start waited
its whole 300 s for them to come up, and the stop waited its 300 s too for an instance
the start had already taken up again. The other way round, a `stack stop` during a
`stack start` ended the start's wait but said only "not settled". A fake owner whose
stops of the slow app are held (its TERM trap); nothing sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backend.cli import render_changes
from backend.generation import Generation
from backend.instance import Ready, State
from backend.testing import FakeOwner, api_call, run_generation, until

CONFIG = ('[stacks.s.apps.slow]\ncommand = ["sleep", "1000"]\ninstances = 3\n'
          'restart = "always"\n'
          '[stacks.s.apps.quick]\ncommand = ["sleep", "1000"]\n')
NOTIFY = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\ninstances = 2\n'
          'restart = "always"\nready = { kind = "notify", timeout = 20 }\n')
SLOW = ["s/slow/0", "s/slow/1", "s/slow/2"]
KEYS = [*SLOW, "s/quick/0"]
BOUND = 2.0   # seconds: far more than the loop turns these answers take


class SlowStops(FakeOwner):
    """Stops of the ``slow`` app wait until ``trapped`` is set, as a TERM trap that
    sleeps before it exits makes them; every other call is answered at once."""

    def __init__(self) -> None:
        super().__init__()
        self.trapped = asyncio.Event()

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   epoch: int | None = None, timeout: float | None = None, **kw: Any) -> Any:
        if method == "stop" and "/slow/" in dict(params or {}).get("launch_key", ""):
            await self.trapped.wait()
        return await super().call(method, params, epoch=epoch, timeout=timeout, **kw)


def stack_stop(gen: Generation, digest: str | None) -> Any:
    return gen.api.stack_stop(api_call("stack.stop", stack="s", dry_run=digest is None,
                                       digest=digest, timeout=300.0))


async def reviewed_stop(gen: Generation) -> asyncio.Task[Any]:
    """The reviewed `stack stop s`, running."""
    review = await stack_stop(gen, None)
    return asyncio.create_task(stack_stop(gen, review["digest"]))


def states(gen: Generation, keys: list[str]) -> list[State]:
    return [gen.sup.instances[k].state for k in keys]


def test_a_stack_start_during_a_stack_stop_starts_what_still_stops(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert isinstance(owner, SlowStops)
        stop = await reviewed_stop(gen)
        await until(lambda: states(gen, KEYS) == [State.STOPPING] * 3 + [State.STOPPED],
                    "slow instances stopping, quick stopped")
        start = asyncio.create_task(gen.api.stack_start(api_call("stack.start",
                                                                 stack="s")))
        async with asyncio.timeout(BOUND):   # superseded: it answers before the slow stops end
            stopped = await stop
        assert stopped["intent"] == "stopped" and stopped["settled"] is False, stopped
        assert stopped["superseded"] == {"by": "stack start", "intent": "running",
                                         "revision": 2}, stopped
        assert [stopped["instances"][k] for k in SLOW] == ["stopping"] * 3
        said = render_changes.stack(stopped)
        assert "(superseded by a later `tenure stack start s`: the intent is running" in said
        assert "not settled in time" not in said
        assert not start.done()   # it answers when its instances are up

        owner.trapped.set()
        async with asyncio.timeout(BOUND):
            started = await start
        assert started == {"stack": "s", "intent": "running", "settled": True,
                           "instances": dict.fromkeys(KEYS, "ready")}
        assert [gen.sup.instances[k].generation for k in KEYS] == [2, 2, 2, 2]
        assert owner.intents == {"s": {"intent": "running", "revision": 2}}
        assert gen.api.running_steps() == []
    run_generation(tmp_path, CONFIG, body, owner=SlowStops())


def test_a_stack_stop_during_a_stack_start_says_the_start_was_superseded(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        await until(lambda: states(gen, ["s/a/0", "s/a/1"]) == [State.RUNNING] * 2,
                    "running")
        for k in ("s/a/0", "s/a/1"):
            gen.sup.feed(k, Ready())
        async with asyncio.timeout(BOUND):
            assert (await (await reviewed_stop(gen)))["settled"] is True
        start = asyncio.create_task(gen.api.stack_start(api_call("stack.start",
                                                                 stack="s")))
        await until(lambda: states(gen, ["s/a/0", "s/a/1"]) == [State.RUNNING] * 2,
                    "started again, not ready yet")
        async with asyncio.timeout(BOUND):
            stopped = await (await reviewed_stop(gen))
            started = await start
        assert stopped == {"stack": "s", "intent": "stopped", "settled": True,
                           "instances": {"s/a/0": "stopped", "s/a/1": "stopped"}}
        assert started["intent"] == "running" and started["settled"] is False, started
        assert started["superseded"] == {"by": "stack stop", "intent": "stopped",
                                         "revision": 3}, started
        said = render_changes.stack(started)
        assert "(superseded by a later `tenure stack stop s`: the intent is stopped" in said
        assert "not settled in time" not in said
        assert owner.intents == {"s": {"intent": "stopped", "revision": 3}}
    run_generation(tmp_path, NOTIFY, body, ready=False)


def test_a_stack_start_during_the_stops_intent_write_still_wins(tmp_path: Path):
    """The start arrives while the owner has not yet answered the stop's intent write:
    it must not read the old intent (`running`, nothing to change) and answer at once,
    leaving the stop to land after it."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        owner.hold("stack.set_intent")
        stop = await reviewed_stop(gen)
        await until(lambda: bool(owner.sent("stack.set_intent")), "intent write sent")
        start = asyncio.create_task(gen.api.stack_start(api_call("stack.start",
                                                                 stack="s")))
        for _ in range(50):
            await asyncio.sleep(0)
        assert not start.done()   # it waits for the stop's intent and stops first
        owner.release("stack.set_intent")
        async with asyncio.timeout(BOUND):
            stopped, started = await stop, await start
        assert stopped["intent"] == "stopped", stopped
        assert started == {"stack": "s", "intent": "running", "settled": True,
                           "instances": dict.fromkeys(KEYS, "ready")}
        assert owner.intents == {"s": {"intent": "running", "revision": 2}}
        assert states(gen, KEYS) == [State.READY] * 4
    run_generation(tmp_path, CONFIG, body)


def test_a_drain_during_the_starts_intent_write_still_starts_what_still_stops(
        tmp_path: Path):
    """A handoff's drain that begins while the start writes its intent: the start of an
    instance still stopping is the rest of that step, not a new one the drain refuses
    (which would leave it stopped under a `running` intent); the drain waits for it."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert isinstance(owner, SlowStops)
        stop = await reviewed_stop(gen)
        await until(lambda: states(gen, SLOW) == [State.STOPPING] * 3, "stopping")
        owner.hold("stack.set_intent")
        start = asyncio.create_task(gen.api.stack_start(api_call("stack.start",
                                                                 stack="s")))
        await until(lambda: len(owner.sent("stack.set_intent")) == 2, "start's write sent")
        gen.api.pause()
        owner.release("stack.set_intent")
        await until(lambda: sorted(gen.api.running_steps()) == [
            f"stack start {k}" for k in SLOW], "each start after its stop held")
        owner.trapped.set()
        await until(lambda: states(gen, KEYS) == [State.READY] * 4, "all started")
        assert [gen.sup.instances[k].generation for k in KEYS] == [2, 2, 2, 2]
        await until(lambda: not gen.api.running_steps(), "the steps ended")
        async with asyncio.timeout(BOUND):
            await asyncio.gather(stop, start, return_exceptions=True)
    run_generation(tmp_path, CONFIG, body, owner=SlowStops())
