"""A plan made while an operation rolls a restart out. Was: the live revision did not
cover which definition each instance runs, so such a plan listed the roll's own
instances as `running an older definition` (pulling the roll's stack into the plan: a
change to another stack was refused OPERATION_IN_PROGRESS), stayed applicable once the
roll ended (applying it restarted an instance already on the new definition again), and
had the fingerprint of a plan of the same file made after the roll, though its changes
differed. Fake owner (readiness by notify, which only the test gives); nothing sleeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.generation import Generation
from backend.instance import Ready, State
from backend.testing import FakeOwner, run_generation, until
from protocol.errors import StalePlan

V1 = ('[stacks.s.apps.a]\ncommand = ["a1"]\ninstances = 2\n'
      'ready = { kind = "notify", timeout = 20 }\n'
      '[stacks.t.apps.b]\ncommand = ["b1"]\n')
V2 = V1.replace('"a1"', '"a2"')
V3 = V2.replace('"b1"', '"b2"')


async def _ready(gen: Generation, key: str, generation: int) -> None:
    """Instance ``key``'s launch ``generation`` comes up; READY=1, as its notify stream
    would say."""
    inst = gen.sup.instances[key]
    await until(lambda: inst.generation == generation and inst.state is State.RUNNING,
                f"{key} launch {generation} running")
    gen.sup.feed(key, Ready())


async def _mid_roll(gen: Generation) -> dict[str, Any]:
    """Every instance of V1 up, then V2 applied: its roll is at s/a/0 (relaunched, not
    ready yet), s/a/1 still runs a1. Returns the operation."""
    for k in ("s/a/0", "s/a/1"):
        await _ready(gen, k, 1)
    plan = await gen.api.plan_text(V2, "/v2.toml")
    op = gen.api.admit(plan["id"], None)
    inst = gen.sup.instances["s/a/0"]
    await until(lambda: inst.generation == 2 and inst.state is State.RUNNING, "rolling")
    return op


async def _finish_roll(gen: Generation, op: dict[str, Any]) -> None:
    await _ready(gen, "s/a/0", 2)
    await _ready(gen, "s/a/1", 2)
    await until(lambda: gen.store.operation(op["id"])["outcome"] is not None, "roll done")
    assert gen.store.operation(op["id"])["outcome"] == "success"


def _argv(owner: FakeOwner, instance_key: str) -> list[list[str]]:
    stack, app, index = instance_key.split("/")
    return [p["argv"] for p in owner.sent("launch")
            if (p["stack"], p["app"], p["instance"]) == (stack, app, int(index))]


def test_a_plan_made_during_a_roll_leaves_the_rolls_instances_to_it(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        op = await _mid_roll(gen)
        plan = await gen.api.plan_text(V3, "/v3.toml")
        assert plan["changes"] == [{"action": "restart", "app": "t/b", "instances": 1,
                                    "reason": "definition changed: command",
                                    "changed": ["command"]}], plan["changes"]
        assert plan["stacks"] == ["t"]
        other = gen.api.admit(plan["id"], None)   # s is the roll's, t is free
        assert other["id"] is not None and other["stacks"] == ["t"], other
        await _finish_roll(gen, op)
        await until(lambda: gen.store.operation(other["id"])["outcome"] is not None,
                    "t done")
        assert gen.store.operation(other["id"])["outcome"] == "success"
        assert _argv(owner, "s/a/1") == [["a1"], ["a2"]]   # restarted once, by the roll
        assert _argv(owner, "t/b/0") == [["b1"], ["b2"]]
    run_generation(tmp_path, V1, body, ready=False)


def test_a_plan_made_during_a_roll_is_stale_once_the_roll_ended(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        op = await _mid_roll(gen)
        during = await gen.api.plan_text(V3, "/v3.toml")
        await _finish_roll(gen, op)
        after = await gen.api.plan_text(V3, "/v3.toml")
        assert after["changes"] == during["changes"]   # the roll's instances are its own
        # ... but not from the same starting point: what runs moved on
        assert after["fingerprint"] != during["fingerprint"]
        with pytest.raises(StalePlan):
            gen.api.admit(during["id"], None)
        assert _argv(owner, "s/a/1") == [["a1"], ["a2"]]
    run_generation(tmp_path, V1, body, ready=False)

