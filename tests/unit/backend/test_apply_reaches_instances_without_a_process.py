"""An apply's config reaches at once the instances that have no process to keep: one
whose start waits for it to be down (`tenure restart`), one relaunched from backoff.
Was: only an instance whose definition the apply left alone took the new App when it was
admitted; the others kept the old one until their own restart step, so a launch before
it ran the old command, and the step then restarted it a third time. Likewise the new
policy (restart, backoff, ...) reached an instance whose definition changed only at its
step, though a policy "takes effect at once". Fake owner (readiness by notify for s/a,
which only the test gives); nothing sleeps."""

from __future__ import annotations

import asyncio
from pathlib import Path

from backend.generation import Generation
from backend.instance import Ready, State
from backend.model import RestartMode
from backend.testing import FakeOwner, api_call, run_generation, until

W1 = ('[stacks.s.apps.a]\ncommand = ["old-a"]\ninstances = 2\n'
      'ready = { kind = "notify", timeout = 20 }\n'
      '[stacks.s.apps.b]\ncommand = ["old-b"]\n')
W2 = W1.replace('"old-a"', '"new-a"').replace('"old-b"', '"new-b"')


async def _ready(gen: Generation, key: str, generation: int) -> None:
    inst = gen.sup.instances[key]
    await until(lambda: inst.generation == generation and inst.state is State.RUNNING,
                f"{key} launch {generation} running")
    gen.sup.feed(key, Ready())


def _argv(owner: FakeOwner, app: str) -> list[list[str]]:
    return [p["argv"] for p in owner.sent("launch") if p["app"] == app]


async def _up(gen: Generation) -> None:
    for k in ("s/a/0", "s/a/1"):
        await _ready(gen, k, 1)
    b = gen.sup.instances["s/b/0"]
    await until(lambda: b.state is State.READY, "s/b/0 ready")


async def _apply(gen: Generation, text: str) -> dict:
    plan = await gen.api.plan_text(text, "/w2.toml")
    return gen.api.admit(plan["id"], None)


async def _roll_a(gen: Generation, op: dict) -> None:
    await _ready(gen, "s/a/0", 2)
    await _ready(gen, "s/a/1", 2)
    await until(lambda: gen.store.operation(op["id"])["outcome"] is not None, "op done",
                turns=2000)
    assert gen.store.operation(op["id"])["outcome"] == "success"


def test_a_start_waiting_for_down_runs_the_config_admitted_meanwhile(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        await _up(gen)
        owner.hold("stop")
        restart = asyncio.create_task(
            gen.api.restart(api_call("restart", target="s/b", timeout=5.0)))
        b = gen.sup.instances["s/b/0"]
        await until(lambda: b.state is State.STOPPING, "s/b/0 stopping")
        op = await _apply(gen, W2)
        owner.release("stop")
        assert (await restart)["settled"]
        await _roll_a(gen, op)
        assert _argv(owner, "b") == [["old-b"], ["new-b"]]   # not old-b again, nor a third
        assert b.generation == 2 and b.state is State.READY
    run_generation(tmp_path, W1, body, ready=False)


def test_a_relaunch_from_backoff_runs_the_config_admitted_before(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        await _up(gen)
        op = await _apply(gen, W2)
        a0 = gen.sup.instances["s/a/0"]
        await until(lambda: a0.generation == 2, "the roll at s/a/0")
        b = gen.sup.instances["s/b/0"]
        gen.sup.on_observation(owner.exit(b.launch_key, 1))   # b ends, is relaunched
        await until(lambda: b.generation == 2 and b.state is State.READY, "s/b/0 again")
        await _roll_a(gen, op)
        assert _argv(owner, "b") == [["old-b"], ["new-b"]]
        assert b.generation == 2
    run_generation(tmp_path, W1, body, ready=False)


def test_a_policy_reaches_an_instance_before_its_definition_does(tmp_path: Path):
    """s/a/1 keeps running old-a until its step; `restart = "never"` is its policy from
    the moment the apply is admitted: ended meanwhile, it is not relaunched."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        await _up(gen)
        op = await _apply(gen, W2.replace('instances = 2\n',
                                          'instances = 2\nrestart = "never"\n'))
        a1 = gen.sup.instances["s/a/1"]
        assert a1.app.restart is RestartMode.NEVER
        assert a1.app.command == ("old-a",) and a1.generation == 1   # its process, still
        gen.sup.on_observation(owner.exit(a1.launch_key, 1))
        assert a1.state is State.EXITED, a1.state   # on-failure would relaunch old-a
        await _ready(gen, "s/a/0", 2)
        await until(lambda: gen.store.operation(op["id"])["outcome"] is not None, "done")
        # ended on its own, left down by its policy: its step leaves it so, on new-a
        assert a1.state is State.EXITED and a1.app.command == ("new-a",)
        assert [p["argv"] for p in owner.sent("launch") if p["instance"] == 1] == \
            [["old-a"]]
    run_generation(tmp_path, W1, body, ready=False)
