"""A handoff the guardian leaves (backend.drainstate, backend.drainwatch): the table is
complete; a drained generation whose guardian is gone, or whose deadline passed,
resumes serving; one whose owner holds a newer epoch stands down; after a checkpoint it
withdraws the checkpoint first and puts it back if a fence landed meanwhile. Fake owner,
fake clock, fake process table: nothing sleeps."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from backend.certify import publish_certificate
from backend.drainstate import HELD, TRANSITIONS, Action, DrainState, Event, Stage
from backend.drainwatch import FENCE_GRACE_S, WITHDRAWN, Caller, DrainWatch, deadline
from backend.testing import FakeOwner, api_call, run_generation, until
from protocol.errors import OperationInProgress, TransportLost

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def test_every_stage_has_a_cell_for_every_event() -> None:
    assert {(s, e) for s in Stage for e in Event} == set(TRANSITIONS)


def test_a_refusal_changes_nothing_and_only_requests_are_refused() -> None:
    for (stage, event), step in TRANSITIONS.items():
        if step.action is Action.REFUSE:
            assert step.stage is stage and event in (Event.DRAIN, Event.CHECKPOINT)


def test_a_left_or_expired_handoff_resumes_from_every_held_stage() -> None:
    for stage in HELD:
        for event in (Event.LEFT, Event.EXPIRED, Event.RESUME):
            assert TRANSITIONS[stage, event] == (Stage.SERVING, Action.RESUME)
        assert TRANSITIONS[stage, Event.FENCED] == (Stage.STOOD_DOWN, Action.STAND_DOWN)


def test_a_drain_answered_after_a_resume_changes_nothing() -> None:
    state = DrainState()
    assert state.feed(Event.DRAIN, 1.0) is Action.WATCH
    assert state.feed(Event.LEFT, 2.0) is Action.RESUME
    assert state.feed(Event.ANSWERED, 3.0) is Action.NONE
    assert (state.stage, state.since) == (Stage.SERVING, 2.0)


def test_deadlines() -> None:
    assert deadline(Stage.DRAINING, 5.0, 1.0, 30.0) == 61.0
    assert deadline(Stage.DRAINED, 5.0, 1.0, 0.0) == 3.0       # at least 1 s of timeout
    assert deadline(Stage.CHECKPOINTED, 5.0, 1.0, 30.0) == 5.0 + FENCE_GRACE_S
    assert deadline(Stage.SERVING, 5.0, 1.0, 30.0) is None


def test_the_caller_is_gone_only_when_known_and_ended() -> None:
    assert not Caller().gone(lambda pid, ticks: False)           # unknown: never
    assert Caller(5, None).gone(lambda pid, ticks: True)          # gone when asked about
    assert not Caller(5, 7).gone(lambda pid, ticks: (pid, ticks) == (5, 7))
    assert Caller(5, 7).gone(lambda pid, ticks: False)            # ended, or pid reused


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _watch(gen: Any, *, gone: bool = False, clock: Clock | None = None,
           timeout: float = 30.0) -> DrainWatch:
    async def no_sleep(delay: float) -> None:
        await asyncio.sleep(0)
    return DrainWatch(gen, Caller(4242, 7), timeout, clock=clock or Clock(), sleep=no_sleep,
                      alive=lambda pid, ticks: not gone)


def _run(tmp_path: Path, body: Any) -> None:
    async def drained(gen: Any, owner: FakeOwner) -> None:
        assert (await gen.drain(30.0))["drained"] is True
        await body(gen, owner)
    run_generation(tmp_path, ONE, drained)


def test_the_guardian_gone_after_the_drain_the_generation_serves_again(tmp_path: Path):
    async def body(gen: Any, owner: FakeOwner) -> None:
        await _watch(gen, gone=True).run()
        assert gen.drain_state.stage is Stage.SERVING
        assert not gen.sup.frozen and not gen.draining and not gen.api.gate.paused
        assert not gen.sup.fenced
    _run(tmp_path, body)


def test_a_deadline_passed_with_the_guardian_alive_the_generation_serves_again(
        tmp_path: Path):
    async def body(gen: Any, owner: FakeOwner) -> None:
        clock = Clock()
        watch = _watch(gen, clock=clock, timeout=2.0)
        task = asyncio.create_task(watch.run())
        for _ in range(20):                   # rounds go by: not due yet
            await asyncio.sleep(0)
        assert gen.drain_state.stage is Stage.DRAINED and not owner.sent("status")
        clock.now += 4.0                      # twice the drain's timeout
        await until(task.done, "resumed")
        assert gen.drain_state.stage is Stage.SERVING and not gen.sup.frozen
    _run(tmp_path, body)


def test_the_owner_holds_a_newer_epoch_the_generation_stands_down(tmp_path: Path):
    async def body(gen: Any, owner: FakeOwner) -> None:
        owner.epoch += 1                      # a candidate's fence landed
        await _watch(gen, gone=True).run()
        assert gen.drain_state.stage is Stage.STOOD_DOWN
        assert gen.sup.fenced and gen.sup.frozen and gen.draining
        assert gen.resume() == {"resumed": False}
        with pytest.raises(OperationInProgress):
            await gen.drain(30.0)
    _run(tmp_path, body)


def test_after_a_checkpoint_it_is_withdrawn_before_the_generation_serves_again(
        tmp_path: Path):
    async def body(gen: Any, owner: FakeOwner) -> None:
        path = tmp_path / "act.checkpoint.json"
        gen.checkpoint(str(path))
        await _watch(gen, gone=True).run()
        assert gen.drain_state.stage is Stage.SERVING
        assert not path.exists() and Path(f"{path}{WITHDRAWN}").exists()
    _run(tmp_path, body)


def test_a_fence_landing_while_the_checkpoint_is_withdrawn_puts_it_back(tmp_path: Path):
    async def body(gen: Any, owner: FakeOwner) -> None:
        path = tmp_path / "act.checkpoint.json"
        gen.checkpoint(str(path))
        asked: list[int] = []

        def before(method: str, params: dict[str, Any]) -> None:
            if method == "status":
                asked.append(1)
                if len(asked) == 2:   # between the two questions
                    owner.epoch += 1
        owner.before = before
        await _watch(gen, gone=True).run()
        assert gen.drain_state.stage is Stage.STOOD_DOWN and gen.sup.fenced
        assert path.exists() and not Path(f"{path}{WITHDRAWN}").exists()
    _run(tmp_path, body)


def test_an_owner_that_does_not_answer_leaves_the_generation_held(tmp_path: Path):
    async def body(gen: Any, owner: FakeOwner) -> None:
        def silent(method: str, params: dict[str, Any]) -> None:
            if method == "status":
                raise TransportLost("test: no answer")
        owner.before = silent
        watch = _watch(gen, gone=True)
        task = asyncio.create_task(watch.run())
        await until(lambda: len(owner.sent("status")) >= 3, "asked again")
        assert gen.drain_state.stage is Stage.DRAINED and gen.sup.frozen
        owner.before = None
        await until(task.done, "resumed once it answers")
        assert gen.drain_state.stage is Stage.SERVING
    _run(tmp_path, body)


def test_fenced_after_it_resumed_its_owner_calls_are_refused_and_it_stands_down(
        tmp_path: Path):
    """The fence of the handoff it left lands after the generation resumed: its next
    owner call gets STALE_EPOCH, it acts no more and never certifies again."""
    async def body(gen: Any, owner: FakeOwner) -> None:
        await _watch(gen, gone=True).run()
        assert gen.drain_state.stage is Stage.SERVING
        owner.epoch += 1
        restart = asyncio.create_task(gen.api.restart(api_call("restart", target="s/a",
                                                                timeout=0.0)))
        await until(lambda: gen.sup.fenced, "fenced by the owner's answer")
        launches = len(owner.sent("launch"))
        assert await publish_certificate(gen) is False
        restart.cancel()
        await asyncio.gather(restart, return_exceptions=True)
        assert len(owner.sent("launch")) == launches
    _run(tmp_path, body)
