"""`tenure status` says why an instance an open apply still starts is stopped: its
step waits for the apps it starts after (`starts once d/a/0 is ready`), or for the
steps before it (`waits for its step in operation op-…`). Was: `never started` for the
whole wait, which the docs keep for an apply that ended before its step. Once the step
ran, or the operation ended, the reason is what it was. Fake owner (readiness by
notify, which only the test gives); nothing sleeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.generation import Generation
from backend.instance import Ready, State, StopRequested
from backend.testing import FakeOwner, api_call, run_generation, until

BEFORE = '[stacks.d.apps.old]\ncommand = ["old"]\n'
ADDS = ('[stacks.d.apps.a]\ncommand = ["a"]\nready = { kind = "notify", timeout = 20 }\n'
        '[stacks.d.apps.b]\ncommand = ["b"]\nafter = ["a"]\n')
REPLACES = ADDS.replace("[stacks.d.apps.b]", "[stacks.e.apps.b]").replace(
    'after = ["a"]\n', "")   # e/b stops nothing and waits for nothing: only for its step


async def _status_reasons(gen: Generation) -> dict[str, Any]:
    rows = (await gen.api.status(api_call("status")))["apps"]
    return {r["key"]: r["reason"] for r in rows}


async def _apply(gen: Generation, text: str) -> str:
    plan = await gen.api.plan_text(text, "/next.toml")
    return str(gen.api.admit(plan["id"], None)["id"])


def _outcome(gen: Generation, op_id: str) -> str | None:
    return gen.store.operation(op_id)["outcome"]   # type: ignore[no-any-return]


def test_an_app_after_another_says_it_starts_once_that_one_is_ready(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        sup = gen.sup
        op_id = await _apply(gen, BEFORE + ADDS)
        a = sup.instances["d/a/0"]
        await until(lambda: a.state is State.RUNNING, "a launched, not ready")
        b = sup.instances["d/b/0"]
        assert b.state is State.STOPPED and not b.started
        assert sup.reason("d/b/0") == "starts once d/a/0 is ready"
        assert (await _status_reasons(gen))["d/b/0"] == "starts once d/a/0 is ready"
        sup.feed("d/a/0", Ready())
        await until(lambda: _outcome(gen, op_id) is not None, "applied")
        assert _outcome(gen, op_id) == "success"
        assert b.state is State.READY and sup.reason("d/b/0") is None
        assert (await _status_reasons(gen))["d/b/0"] is None
    run_generation(tmp_path, BEFORE, body)


def test_an_abandoned_apply_leaves_it_never_started(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        sup = gen.sup
        op_id = await _apply(gen, BEFORE + ADDS)
        await until(lambda: sup.instances["d/a/0"].state is State.RUNNING, "a launched")
        assert sup.reason("d/b/0") == "starts once d/a/0 is ready"
        await gen.api.ops.abandon(op_id)
        assert sup.reason("d/b/0") == "never started"
        sup.feed("d/a/0", Ready())                  # nothing starts it any more
        await until(lambda: not gen.api.ops.busy(), "the operation's task ended")
        assert sup.instances["d/b/0"].state is State.STOPPED
        assert sup.reason("d/b/0") == "never started"
    run_generation(tmp_path, BEFORE, body)


def test_a_failed_apply_leaves_it_never_started(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        sup = gen.sup
        op_id = await _apply(gen, BEFORE + ADDS)
        await until(lambda: sup.instances["d/a/0"].state is State.RUNNING, "a launched")
        assert sup.reason("d/b/0") == "starts once d/a/0 is ready"
        sup.feed("d/a/0", StopRequested())    # `tenure stop d/a` fails a's step
        await until(lambda: _outcome(gen, op_id) is not None, "ended")
        assert _outcome(gen, op_id) == "failed"
        assert sup.reason("d/b/0") == "never started"
    run_generation(tmp_path, BEFORE, body)


def test_an_app_whose_step_comes_after_a_stop_says_it_waits_for_its_step(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        sup = gen.sup
        owner.hold("stop")                          # the removed app's stop step waits
        op_id = await _apply(gen, REPLACES)
        await until(lambda: bool(owner.sent("stop")), "old's stop sent")
        for key in ("d/a/0", "e/b/0"):
            assert sup.instances[key].state is State.STOPPED
            assert sup.reason(key) == f"waits for its step in operation {op_id}"
        owner.release("stop")
        await until(lambda: sup.instances["d/a/0"].state is State.RUNNING, "a launched")
        assert sup.reason("d/a/0").startswith("waiting for readiness")   # type: ignore
        assert sup.reason("e/b/0") == f"waits for its step in operation {op_id}"
        sup.feed("d/a/0", Ready())
        await until(lambda: _outcome(gen, op_id) is not None, "applied")
        assert _outcome(gen, op_id) == "success"
        assert sup.instances["e/b/0"].state is State.READY
        assert sup.reason("e/b/0") is None
    run_generation(tmp_path, BEFORE, body)


def test_an_instance_a_scale_adds_waits_for_its_step_but_not_one_it_keeps(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        sup = gen.sup
        sup.feed("d/old/0", StopRequested())     # stopped by the operator: stays so
        await until(lambda: sup.instances["d/old/0"].state is State.STOPPED, "stopped")
        scaled = BEFORE + 'instances = 2\n' + ADDS   # steps: start a, then scale old
        op_id = await _apply(gen, scaled)
        await until(lambda: sup.instances["d/a/0"].state is State.RUNNING, "a launched")
        assert sup.reason("d/old/1") == f"waits for its step in operation {op_id}"
        assert sup.reason("d/old/0") is None
        sup.feed("d/a/0", Ready())
        await until(lambda: _outcome(gen, op_id) is not None, "applied")
        assert _outcome(gen, op_id) == "success"
        assert sup.instances["d/old/1"].state is State.READY
        assert sup.instances["d/old/0"].state is State.STOPPED
        assert sup.reason("d/old/1") is None and sup.reason("d/old/0") is None
    run_generation(tmp_path, BEFORE, body)
