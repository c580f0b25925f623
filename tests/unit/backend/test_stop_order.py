"""Stops go the reverse of ``after``: when apps of a stack stop together (`tenure stack
stop`, `tenure stop STACK`, a stopped stack's instances a new generation finds running),
an app is asked to stop only once the apps that start after it are down. Before, every
instance was asked at once: ``db`` went down under a ``web`` still draining its
requests. A fake owner whose stops of ``web`` are held (a TERM trap); nothing sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from backend.config import parse_config
from backend.generation import Generation
from backend.instance import Instance, State
from backend.start_order import stop_levels
from backend.testing import FakeOwner, api_call, run_generation, until
from protocol.errors import ShuttingDown

CONFIG = ('[stacks.s.apps.db]\ncommand = ["sleep", "1000"]\n'
          '[stacks.s.apps.api]\ncommand = ["sleep", "1000"]\nafter = ["db"]\n'
          'instances = 2\n'
          '[stacks.s.apps.web]\ncommand = ["sleep", "1000"]\nafter = ["api"]\n'
          '[stacks.s.apps.worker]\ncommand = ["sleep", "1000"]\nafter = ["db"]\n'
          '[stacks.t.apps.solo]\ncommand = ["sleep", "1000"]\n')
BOUND = 2.0   # seconds: far more than the loop turns these answers take


def instances(text: str) -> dict[str, Instance]:
    config = parse_config(text, "unit.toml")
    return {f"{a.key}/{n}": Instance(app=a, index=n)
            for a in config.apps() for n in range(a.instances)}


def test_the_levels_are_the_start_order_reversed_stack_by_stack() -> None:
    found = instances(CONFIG)
    assert stop_levels(found, list(found)) == [
        ["s/web/0", "s/worker/0", "t/solo/0"], ["s/api/0", "s/api/1"], ["s/db/0"]]
    # an app not stopping now still orders the others: web waits for api, api for db
    assert stop_levels(found, ["s/db/0", "s/web/0"]) == [["s/web/0"], ["s/db/0"]]
    assert stop_levels(found, ["s/api/1"]) == [["s/api/1"]]
    assert stop_levels(found, []) == []


def test_apps_in_a_cycle_of_two_definitions_stop_last_together() -> None:
    old = instances('[stacks.s.apps.a]\ncommand = ["x"]\nafter = ["b"]\n'
                    '[stacks.s.apps.b]\ncommand = ["x"]\n[stacks.s.apps.c]\ncommand = ["x"]\n')
    new = instances('[stacks.s.apps.b]\ncommand = ["x"]\nafter = ["a"]\n'
                    '[stacks.s.apps.a]\ncommand = ["x"]\n')
    mixed = {"s/a/0": old["s/a/0"], "s/b/0": new["s/b/0"], "s/c/0": old["s/c/0"]}
    assert stop_levels(mixed, list(mixed)) == [["s/c/0"], ["s/a/0", "s/b/0"]]


class SlowWeb(FakeOwner):
    """Stops of ``web`` wait until ``trapped`` is set; every other call is answered at
    once."""

    def __init__(self) -> None:
        super().__init__()
        self.trapped = asyncio.Event()
        self.stops: list[str] = []   # the apps asked to stop, in order (each once)

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   epoch: int | None = None, timeout: float | None = None, **kw: Any) -> Any:
        if method == "stop":
            app = dict(params or {})["launch_key"].split("/")[1]
            self.stops += [app] if app not in self.stops else []
            if app == "web":
                await self.trapped.wait()
        return await super().call(method, params, epoch=epoch, timeout=timeout, **kw)


def stopped_apps(owner: FakeOwner) -> list[str]:
    assert isinstance(owner, SlowWeb)
    return owner.stops


def state(gen: Generation, key: str) -> State:
    return gen.sup.instances[key].state


async def stack_stop(gen: Generation) -> Any:
    review = await gen.api.stack_stop(api_call("stack.stop", stack="s", dry_run=True,
                                               digest=None, timeout=300.0))
    return await gen.api.stack_stop(api_call("stack.stop", stack="s", dry_run=False,
                                             digest=review["digest"], timeout=300.0))


def plain_stop(gen: Generation) -> Any:
    return gen.api.stop(api_call("stop", target="s", timeout=300.0))


@pytest.mark.parametrize("command", [stack_stop, plain_stop])
def test_an_app_stops_once_the_apps_that_start_after_it_are_down(tmp_path: Path,
                                                                  command: Any) -> None:
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert isinstance(owner, SlowWeb)
        stop = asyncio.create_task(command(gen))
        await until(lambda: state(gen, "s/web/0") is State.STOPPING
                    and state(gen, "s/worker/0") is State.STOPPED, "web stopping")
        for _ in range(50):   # the turns in which api and db would have been asked
            await asyncio.sleep(0)
        assert stopped_apps(owner) == ["web", "worker"]
        assert state(gen, "s/api/0") is state(gen, "s/db/0") is State.READY
        assert "solo" not in stopped_apps(owner)
        owner.trapped.set()
        async with asyncio.timeout(BOUND):
            answer = await stop
        assert answer["settled"] is True, answer
        assert stopped_apps(owner) == ["web", "worker", "api", "db"]
        assert set(answer["instances"].values()) == {"stopped"}
    run_generation(tmp_path, CONFIG, body, owner=SlowWeb())


def test_a_stack_start_during_an_ordered_stop_asks_no_further_level(tmp_path: Path) -> None:
    """The latest command wins: the start has the stack, the stop's later levels are
    not asked (db, api keep running)."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert isinstance(owner, SlowWeb)
        stop = asyncio.create_task(stack_stop(gen))
        await until(lambda: state(gen, "s/web/0") is State.STOPPING, "web stopping")
        start = asyncio.create_task(gen.api.stack_start(api_call("stack.start",
                                                                 stack="s")))
        async with asyncio.timeout(BOUND):
            stopped = await stop
        assert stopped["superseded"]["by"] == "stack start", stopped
        owner.trapped.set()
        async with asyncio.timeout(BOUND):
            started = await start
        assert started["settled"] is True, started
        assert stopped_apps(owner) == ["web", "worker"]
        assert state(gen, "s/db/0") is state(gen, "s/web/0") is State.READY
    run_generation(tmp_path, CONFIG, body, owner=SlowWeb())


def test_a_drain_cuts_a_plain_stop_and_names_what_was_not_asked(tmp_path: Path) -> None:
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert isinstance(owner, SlowWeb)
        stop = asyncio.create_task(plain_stop(gen))
        await until(lambda: state(gen, "s/web/0") is State.STOPPING, "web stopping")
        gen.api.pause()   # a handoff's drain: no step holds it while web stops
        async with asyncio.timeout(BOUND):
            with pytest.raises(ShuttingDown) as cut:
                await stop
        assert cut.value.data["not_stopped"] == ["s/api/0", "s/api/1", "s/db/0"]
        assert "the generation that serves next stops them" in cut.value.msg
        assert gen.api.running_steps() == []
        owner.trapped.set()
    run_generation(tmp_path, CONFIG, body, owner=SlowWeb())


def test_a_stopped_stack_found_running_is_stopped_in_order(tmp_path: Path) -> None:
    """A stack stop cut by a crash or a handoff before it asked every level: the
    generation that serves next (or this one, its handoff aborted) finishes it."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert isinstance(owner, SlowWeb)
        owner.intents["s"] = {"intent": "stopped", "revision": 3}
        gen.api.intents = {"s": dict(owner.intents["s"])}
        gen.api.pause()
        gen.api.unpause()   # an aborted handoff; a new generation does it as it resumes
        await until(lambda: state(gen, "s/web/0") is State.STOPPING, "web stopping")
        for _ in range(50):
            await asyncio.sleep(0)
        assert stopped_apps(owner) == ["web", "worker"]
        owner.trapped.set()
        await until(lambda: all(state(gen, k) is State.STOPPED for k in gen.sup.instances
                                if k.startswith("s/")), "stack s stopped")
        assert stopped_apps(owner) == ["web", "worker", "api", "db"]
        assert state(gen, "t/solo/0") is State.READY
    run_generation(tmp_path, CONFIG, body, owner=SlowWeb())


def test_the_owner_is_told_the_reverse_start_order_of_stacks_with_more_than_one_level(
        caplog: pytest.LogCaptureFixture) -> None:
    """For its own shutdown (`tenure down`, the machine's), with no backend left."""
    from backend.owner_order import StopOrderTeller, stop_order_of
    config = parse_config(CONFIG, "unit.toml")
    assert stop_order_of(config) == {"s": [["web"], ["api", "worker"], ["db"]]}

    async def main() -> None:
        owner, teller = FakeOwner(), StopOrderTeller()
        await teller.sync(owner, 1, {"stopOrder": 1}, config)
        await teller.sync(owner, 1, {"stopOrder": 1}, config)   # told already
        assert owner.stop_order == stop_order_of(config)
        assert len(owner.sent("stack.stop_order")) == 1
        await teller.sync(owner, 2, {"stopOrder": 1}, parse_config(
            '[stacks.s.apps.db]\ncommand = ["x"]\n', "unit.toml"))   # a newer generation's
        assert len(owner.sent("stack.stop_order")) == 2 and teller.told == {}
        old = StopOrderTeller()
        await old.sync(owner, 1, {}, config)   # an owner that predates it
        await old.sync(owner, 1, {}, config)
        assert len(owner.sent("stack.stop_order")) == 2
    asyncio.run(main())
    assert caplog.text.count("the owner predates stopOrder@1") == 1


def test_a_start_asked_during_an_ordered_stop_keeps_its_instance_up(tmp_path: Path) -> None:
    """The latest command wins: `tenure start s/db` while `tenure stop s` waits for web
    leaves db running; the stop does not wait for it and says why."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert isinstance(owner, SlowWeb)
        stop = asyncio.create_task(plain_stop(gen))
        await until(lambda: state(gen, "s/web/0") is State.STOPPING, "web stopping")
        started = await gen.api.start(api_call("start", target="s/db", timeout=5.0))
        assert started["settled"] is True, started
        owner.trapped.set()
        async with asyncio.timeout(BOUND):
            answer = await stop
        assert state(gen, "s/db/0") is State.READY and "db" not in stopped_apps(owner)
        assert answer["settled"] is True and answer["started_meanwhile"] == ["s/db/0"]
        assert answer["instances"]["s/db/0"] == "ready", answer
        assert state(gen, "s/api/0") is State.STOPPED
    run_generation(tmp_path, CONFIG, body, owner=SlowWeb())


class SlowIntent(SlowWeb):
    """``stack.set_intent`` is answered once ``answer`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()
        self.asked = asyncio.Event()

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   epoch: int | None = None, timeout: float | None = None, **kw: Any) -> Any:
        if method == "stack.set_intent":
            self.asked.set()
            await self.answer.wait()
        return await super().call(method, params, epoch=epoch, timeout=timeout, **kw)


def test_a_stack_start_answered_after_an_aborted_drain_is_not_stopped(tmp_path: Path
                                                                       ) -> None:
    """An aborted handoff finds the stack still stopped while a `stack start` waits for
    the owner to write its intent: the stop it resumes must not undo that start."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert isinstance(owner, SlowIntent)
        owner.intents["s"] = {"intent": "stopped", "revision": 3}
        gen.api.intents = {"s": dict(owner.intents["s"])}
        start = asyncio.create_task(gen.api.stack_start(api_call("stack.start",
                                                                 stack="s")))
        await owner.asked.wait()
        gen.api.pause()
        gen.api.unpause()   # resumes the stack stop: the intent still says stopped
        gen.api.unpause()   # twice over: one finisher a stack
        assert len([t for t in gen.api._finishing.values() if not t.done()]) == 1
        owner.answer.set()
        async with asyncio.timeout(BOUND):
            answer = await start
        for _ in range(100):
            await asyncio.sleep(0)
        assert answer["intent"] == "running" and stopped_apps(owner) == []
        assert all(i.state is State.READY for i in gen.sup.instances.values())
    run_generation(tmp_path, CONFIG, body, owner=SlowIntent())


def test_an_instance_left_to_a_later_start_is_not_waited_for(tmp_path: Path) -> None:
    """`tenure start s/api` while `tenure stop s` waits for web: api is left running,
    and db (next) is not held back waiting for api to be down."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert isinstance(owner, SlowWeb)
        stop = asyncio.create_task(plain_stop(gen))
        await until(lambda: state(gen, "s/web/0") is State.STOPPING, "web stopping")
        await gen.api.start(api_call("start", target="s/api", timeout=5.0))
        owner.trapped.set()
        async with asyncio.timeout(BOUND):   # db not held back until the stop's deadline
            answer = await stop
        assert stopped_apps(owner) == ["web", "worker", "db"]
        assert answer["started_meanwhile"] == ["s/api/0", "s/api/1"]
        assert answer["settled"] is True, answer
    run_generation(tmp_path, CONFIG, body, owner=SlowWeb())
