"""The start wanted once an instance is down (backend.after_stop) is bounded and has one
owner per instance: an instance whose stop never ends is not started whenever it ends,
a second request for the same instance joins the first, and one that another start beat
is not repeated. A fake owner whose stop is held; nothing sleeps but a bound of a
hundredth of a second."""

from __future__ import annotations

import asyncio
from pathlib import Path

from backend.after_stop import STOP_SLACK, after_stop_bound
from backend.generation import Generation
from backend.instance import Start, State, StopRequested
from backend.model import StopSpec
from backend.testing import FakeOwner, run_generation, until

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def test_the_bound_covers_the_stop_policy_or_the_request_timeout_if_longer():
    stop = StopSpec(timeout=6.0, kill_after=5.0)
    assert after_stop_bound(stop, 1.0) == 6.0 + 5.0 + STOP_SLACK
    assert after_stop_bound(stop, 600.0) == 600.0


def test_a_start_is_withdrawn_when_the_instance_is_not_down_within_its_bound(
        tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        inst = gen.sup.instances["s/a/0"]
        owner.hold("stop")
        gen.sup.feed("s/a/0", StopRequested())
        started = gen.sup.start_when_down("s/a/0", 0.01)
        assert gen.sup.start_when_down("s/a/0", 60.0) is started   # one per instance
        assert await asyncio.wait_for(started, 5) is False
        assert gen.sup.pending_start("s/a/0") is None
        owner.release("stop")
        await until(lambda: inst.state is State.STOPPED, "stopped")
        for _ in range(50):
            await asyncio.sleep(0)
        assert (inst.state, inst.generation) == (State.STOPPED, 1)
    run_generation(tmp_path, ONE, body)


def test_a_start_of_an_instance_already_down_happens_at_once_and_only_once(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        gen.sup.feed("s/a/0", StopRequested())
        await until(lambda: gen.sup.instances["s/a/0"].state is State.STOPPED, "down")
        started = gen.sup.start_when_down("s/a/0", 60.0)
        assert await asyncio.wait_for(started, 5) is True
        assert gen.sup.instances["s/a/0"].state is not State.STOPPED
        assert gen.sup.pending_start("s/a/0") is None
    run_generation(tmp_path, ONE, body)


def test_a_removed_instance_and_a_closing_backend_withdraw_the_start(tmp_path: Path):
    two = ONE + "instances = 2\n"

    async def body(gen: Generation, owner: FakeOwner) -> None:
        owner.hold("stop")
        for k in ("s/a/0", "s/a/1"):
            gen.sup.feed(k, StopRequested())
        removed = gen.sup.start_when_down("s/a/0", 60.0)
        closing = gen.sup.start_when_down("s/a/1", 60.0)
        gen.sup.forget("s/a/0")
        assert removed.result() is False
        await gen.sup.aclose()
        assert closing.result() is False
        owner.release("stop")
    run_generation(tmp_path, two, body)


def test_a_start_taken_up_by_another_start_first_is_done_not_repeated(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        inst = gen.sup.instances["s/a/0"]
        gen.sup.feed("s/a/0", StopRequested())
        await until(lambda: inst.state is State.STOPPED, "down")
        started = gen.sup.start_when_down("s/a/0", 60.0)
        gen.sup.feed("s/a/0", Start())   # another start, in the same turn
        assert await asyncio.wait_for(started, 5) is True
        await until(lambda: inst.state is State.READY, "up")
        assert inst.generation == 2 and len(owner.sent("launch")) == 2
    run_generation(tmp_path, ONE, body)
