"""The start that follows a stop (the second half of a restart, or a start asked while a
stop still runs) never outlives the operator's later word. Before, each restart left a
task waiting, with no time limit, for the instance to be down: of two concurrent
restarts one was left armed and started the app again after a later `tenure stop`
(which then hung or answered `stopped` for an app that was running). A fake owner
whose stop is held; nothing sleeps but the requests' own short timeouts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from backend.cli import render_changes
from backend.generation import Generation
from backend.instance import State, Stopped
from backend.testing import FakeOwner, api_call, ready_generation, run_generation, until

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


async def settle_turns(n: int = 50) -> None:
    """Let the loop run a while: anything still armed would act by then."""
    for _ in range(n):
        await asyncio.sleep(0)

STOPPING = {"settled": False, "instances": {"s/a/0": "stopping"},
            "reasons": {"s/a/0": "SIGTERM sent 0s ago; SIGKILL in 10s"}}  # the stop held


def test_two_concurrent_restarts_restart_once_and_a_later_stop_wins(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        inst = gen.sup.instances["s/a/0"]
        owner.hold("stop")
        first, second = (asyncio.create_task(gen.api.restart(
            api_call("restart", target="s/a/0", timeout=0.5))) for _ in range(2))
        await until(lambda: bool(owner.sent("stop")), "stopping")
        owner.release("stop")
        want = {"settled": True, "instances": {"s/a/0": "ready"}}
        assert await first == want
        assert await second == want
        assert [p["launch_key"] for p in owner.sent("launch")] == ["s/a/0/1", "s/a/0/2"]
        assert gen.api.running_steps() == []

        stopped = await gen.api.stop(api_call("stop", target="s/a/0", timeout=0.5))
        assert stopped == {"settled": True, "instances": {"s/a/0": "stopped"}}
        await settle_turns()
        assert (inst.state, inst.generation) == (State.STOPPED, 2)   # nothing restarted
        assert len(owner.sent("launch")) == 2
    run_generation(tmp_path, ONE, body)


def test_three_concurrent_restarts_all_answer_and_leave_nothing_armed(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        owner.hold("stop")
        tasks = [asyncio.create_task(gen.api.restart(
            api_call("restart", target="s/a/0", timeout=0.5))) for _ in range(3)]
        await until(lambda: bool(owner.sent("stop")), "stopping")
        owner.release("stop")
        for t in tasks:
            assert (await t)["settled"] is True
        assert gen.sup.instances["s/a/0"].generation == 2
        assert gen.api.running_steps() == []
        await gen.api.stop(api_call("stop", target="s/a/0", timeout=0.5))
        await settle_turns()
        assert gen.sup.instances["s/a/0"].state is State.STOPPED
    run_generation(tmp_path, ONE, body)


def test_a_stop_after_a_restart_whose_stop_outlasted_its_timeout_is_not_undone(
        tmp_path: Path):
    """The `g/slowstop` report: the restart returned at its --timeout while the app
    still stopped; the operator's `tenure stop` then printed `stopped`, and the app was
    started again by the restart's leftover start."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        inst = gen.sup.instances["s/a/0"]
        owner.hold("stop")
        restarted = await gen.api.restart(api_call("restart", target="s/a/0",
                                                   timeout=0.05))
        assert restarted.pop("reasons")["s/a/0"].startswith("SIGTERM sent 0s ago")
        assert restarted == {"settled": False, "instances": {"s/a/0": "stopping"},
                             "not_restarted": [], "stopped_at": "s/a/0"}
        stop = asyncio.create_task(gen.api.stop(api_call("stop", target="s/a/0",
                                                         timeout=0.5)))
        await until(lambda: not gen.api.running_steps(), "the restart's start withdrawn")
        owner.release("stop")
        assert await stop == {"settled": True, "instances": {"s/a/0": "stopped"}}
        await settle_turns()
        assert (inst.state, inst.generation) == (State.STOPPED, 1)
        assert len(owner.sent("launch")) == 1
    run_generation(tmp_path, ONE, body)


def test_a_stop_during_a_restart_ends_the_restart_at_once_and_wins(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        owner.hold("stop")
        restart = asyncio.create_task(gen.api.restart(
            api_call("restart", target="s/a/0", timeout=30.0)))
        await until(lambda: bool(owner.sent("stop")), "stopping")
        stop = asyncio.create_task(gen.api.stop(api_call("stop", target="s/a/0",
                                                         timeout=30.0)))
        answer = await asyncio.wait_for(restart, 5)   # not its 30 s
        assert answer.pop("reasons")["s/a/0"].startswith("SIGTERM sent 0s ago")
        assert answer == {"settled": False, "instances": {"s/a/0": "stopping"},
                          "not_restarted": [], "stopped_at": "s/a/0", "withdrawn": True}
        said = render_changes.instances(answer)   # a later command has it: not a matter of time
        assert "a later command stopped it" in said and "not settled in time" not in said
        owner.release("stop")
        assert (await stop)["instances"] == {"s/a/0": "stopped"}
        await settle_turns()
        assert gen.sup.instances["s/a/0"].state is State.STOPPED
    run_generation(tmp_path, ONE, body)


def test_a_stop_then_a_start_at_once_both_answer_and_the_start_wins(tmp_path: Path):
    """The stop answers once the instance went down, and then the later start takes it
    up again; the stop does not wait its whole --timeout for a `stopped` it can no
    longer see."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        owner.hold("stop")
        stop = asyncio.create_task(gen.api.stop(api_call("stop", target="s/a/0",
                                                         timeout=30.0)))
        await until(lambda: bool(owner.sent("stop")), "stopping")
        start = asyncio.create_task(gen.api.start(api_call("start", target="s/a/0",
                                                           timeout=30.0)))
        await until(lambda: gen.api.running_steps() == ["start s/a/0"], "armed")
        owner.release("stop")
        assert await asyncio.wait_for(stop, 5) == {
            "settled": True, "instances": {"s/a/0": "stopped"}}   # seen down
        assert await asyncio.wait_for(start, 5) == {
            "settled": True, "instances": {"s/a/0": "ready"}}
        assert gen.sup.instances["s/a/0"].generation == 2
        assert gen.api.running_steps() == []
    run_generation(tmp_path, ONE, body)


def test_a_restart_whose_stop_never_ends_does_not_start_the_app_much_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Bounded: before, the start waited for the instance to be down with no time limit
    (and held a drain all that time); a stop that ended an hour later started the app."""
    import backend.api_instances
    monkeypatch.setattr(backend.api_instances, "after_stop_bound",
                        lambda stop, timeout: 0.05)   # the stop policy and slack, short

    async def body(gen: Generation, owner: FakeOwner) -> None:
        inst = gen.sup.instances["s/a/0"]
        owner.hold("stop")
        restarted = await gen.api.restart(api_call("restart", target="s/a/0",
                                                   timeout=0.01))
        assert restarted["settled"] is False
        for _ in range(100):   # the bound passes
            if not gen.api.running_steps():
                break
            await asyncio.sleep(0.01)
        assert gen.api.running_steps() == []
        owner.release("stop")
        await until(lambda: inst.state is State.STOPPED, "stopped")
        await settle_turns()
        assert (inst.state, inst.generation) == (State.STOPPED, 1)
    run_generation(tmp_path, ONE, body)


def test_a_stop_of_several_instances_counts_one_a_later_start_took_up_again(
        tmp_path: Path):
    """Instance 0 is down, and started again by the later start, before instance 1 is:
    the stop still answers (settled: each was down) instead of waiting its --timeout."""
    async def main() -> None:
        owner = FakeOwner()
        async with ready_generation(tmp_path, owner, ONE + "instances = 2\n") as gen:
            owner.hold("stop")
            stop = asyncio.create_task(gen.api.stop(api_call("stop", target="s/a",
                                                             timeout=30.0)))
            await until(lambda: len(owner.sent("stop")) == 2, "both stopping")
            start = asyncio.create_task(gen.api.start(api_call("start", target="s/a/0",
                                                               timeout=30.0)))
            await until(lambda: gen.api.running_steps() == ["start s/a/0"], "armed")
            gen.sup.feed("s/a/0", Stopped())       # instance 0 ends first
            await until(lambda: gen.sup.instances["s/a/0"].generation == 2, "restarted")
            owner.release("stop")
            answer = await asyncio.wait_for(stop, 5)
            assert answer["settled"] is True
            assert answer["instances"]["s/a/1"] == "stopped"
            assert (await asyncio.wait_for(start, 5))["instances"] == {"s/a/0": "ready"}

    asyncio.run(main())


def test_a_start_whose_deferred_start_a_later_stop_withdraws_answers_at_once(
        tmp_path: Path):
    """A start asked while the instance still stopped waits to start it once it is
    down; a stop asked after it withdraws that start. The start then waited out its
    whole --timeout for an instance that would stay stopped."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        owner.hold("stop")
        first_stop = asyncio.create_task(gen.api.stop(api_call(
            "stop", target="s/a/0", timeout=30.0)))
        await until(lambda: bool(owner.sent("stop")), "stopping")
        start = asyncio.create_task(gen.api.start(api_call(
            "start", target="s/a/0", timeout=30.0)))
        await until(lambda: gen.sup.pending_start("s/a/0") is not None, "deferred")
        second_stop = asyncio.create_task(gen.api.stop(api_call(
            "stop", target="s/a/0", timeout=30.0)))
        answer = await asyncio.wait_for(start, 5.0)        # not its 30 s
        assert answer == STOPPING, answer
        owner.release("stop")
        await first_stop
        await second_stop
        assert gen.sup.instances["s/a/0"].state is State.STOPPED
    run_generation(tmp_path, ONE, body)


NEVER_HEALTH = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\nrestart = "never"\n'
                'health = { kind = "tcp", port = 1, interval = 3600, grace = 3600, '
                'failures = 1 }\n')


def test_a_start_while_tenure_stops_an_app_for_a_restart_starts_it_once_down(
        tmp_path: Path):
    """Was: a start asked while tenure itself stopped the app (a failed health check, a
    ready timeout: `restarting`) was ignored by the machine, and under restart = "never"
    the app then ended failed, the start answering `failed`. The operator's start now
    follows that stop, as it follows one asked by a `tenure stop`."""
    from backend.instance import HealthFailed

    async def body(gen: Generation, owner: FakeOwner) -> None:
        inst = gen.sup.instances["s/a/0"]
        owner.hold("stop")
        gen.sup.feed("s/a/0", HealthFailed())
        assert inst.state is State.RESTARTING
        started = asyncio.create_task(gen.api.start(api_call("start", target="s/a/0",
                                                             timeout=0.5)))
        await until(lambda: bool(owner.sent("stop")), "stopping")
        owner.release("stop")
        assert await started == {"settled": True, "instances": {"s/a/0": "ready"}}
        assert (inst.state, inst.generation) == (State.READY, 2)
        await until(lambda: gen.api.running_steps() == [], "the start's step ended")
    run_generation(tmp_path, NEVER_HEALTH, body)


SLOW_READY = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'
              'ready = { kind = "delay", delay = 3600 }\n')


@pytest.mark.parametrize("later", ["stop", "restart"])
def test_a_restart_stopped_again_while_it_comes_up_says_a_later_command_has_it(
        tmp_path: Path, later: str):
    """Was: a restart waiting for its instance to be ready, stopped meanwhile by a later
    stop or restart, answered `(not settled in time)` (exit 4, as a timeout) after a
    second: it says now that a later command has it (`withdrawn`)."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        inst = gen.sup.instances["s/a/0"]
        first = asyncio.create_task(gen.api.restart(api_call("restart", target="s/a/0",
                                                             timeout=1)))
        await until(lambda: inst.state is State.RUNNING and inst.generation == 2,
                    "the restart's launch, waiting for ready")
        await settle_turns()          # the restart waits for it to be ready
        second = asyncio.create_task(getattr(gen.api, later)(api_call(
            later, target="s/a/0", timeout=0.5)))
        answer = await first
        assert (answer["settled"], answer.get("withdrawn")) == (False, True), answer
        assert "not settled in time" not in render_changes.instances(answer)
        await second
    run_generation(tmp_path, SLOW_READY, body, ready=False)
