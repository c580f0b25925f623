"""A rolling restart stops at an instance that does not come back ready: the rest are
left running as they were and listed under ``not_restarted``. Before, the roll went on
through every instance whatever became of the one before, and took the whole app down.
A fake owner (readiness by notify, which only the test gives); nothing sleeps but the
request's own short timeout."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from backend.cli import render_changes
from backend.generation import Generation
from backend.instance import Ready, State
from backend.testing import FakeOwner, api_call, run_generation, until
from protocol.errors import LaunchFailed

THREE = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\ninstances = 3\n'
         'restart = "never"\nready = { kind = "notify", timeout = 20 }\n')
KEYS = ["s/a/0", "s/a/1", "s/a/2"]


async def all_ready(gen: Any) -> None:
    insts = gen.sup.instances
    await until(lambda: len(insts) == 3 and all(
        i.state is State.RUNNING for i in insts.values()), "running")
    for k in KEYS:
        gen.sup.feed(k, Ready())   # READY=1, as the owner's notify stream would say


def test_a_restart_stops_at_an_instance_not_ready_within_its_timeout(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        await all_ready(gen)
        answer = await gen.api.restart(api_call("restart", target="s/a", timeout=0.05))
        assert answer.pop("reasons")["s/a/0"].startswith("waiting for readiness: ")
        assert answer == {"settled": False, "instances": {"s/a/0": "running"},
                          "not_restarted": ["s/a/1", "s/a/2"], "stopped_at": "s/a/0"}
        assert render_changes.instances(answer).splitlines()[-2] == "(not settled in time)"
        assert [p["launch_key"] for p in owner.sent("stop")] == ["s/a/0/1"]
        insts = gen.sup.instances
        assert [(insts[k].state, insts[k].generation) for k in KEYS] == [
            (State.RUNNING, 2), (State.READY, 1), (State.READY, 1)]
    run_generation(tmp_path, THREE, body, ready=False)


def test_a_restart_stops_at_an_instance_that_failed_to_start(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        await all_ready(gen)

        def refuse(method: str, p: dict[str, Any]) -> None:
            if method == "launch" and p["launch_key"] == "s/a/0/2":
                raise LaunchFailed("no such file", {"launch_key": p["launch_key"]})
        owner.before = refuse
        answer = await gen.api.restart(api_call("restart", target="s/a", timeout=5.0))
        reasons = answer.pop("reasons")   # why it failed, as status says it
        assert answer == {"settled": False, "instances": {"s/a/0": "failed"},
                          "not_restarted": ["s/a/1", "s/a/2"], "stopped_at": "s/a/0"}
        assert reasons == {"s/a/0": gen.sup.reason("s/a/0")} and reasons["s/a/0"]
        said = render_changes.instances(answer)   # not a matter of time: it failed
        assert "(the roll stopped at s/a/0: it ended failed)" in said, said
        assert "not settled in time" not in said
        assert [p["launch_key"] for p in owner.sent("stop")] == ["s/a/0/1"]
    run_generation(tmp_path, THREE, body, ready=False)


def test_a_restart_of_ready_instances_still_rolls_through_all(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        await all_ready(gen)

        def notify_ready(method: str, p: dict[str, Any]) -> None:
            if method == "launch":   # READY=1 right after this launch is answered
                key = p["launch_key"].rsplit("/", 1)[0]
                asyncio.get_running_loop().call_soon(gen.sup.feed, key, Ready())
        owner.before = notify_ready
        answer = await gen.api.restart(api_call("restart", target="s/a", timeout=5.0))
        assert answer == {"settled": True, "instances": dict.fromkeys(KEYS, "ready")}
        assert [gen.sup.instances[k].generation for k in KEYS] == [2, 2, 2]
    run_generation(tmp_path, THREE, body, ready=False)
