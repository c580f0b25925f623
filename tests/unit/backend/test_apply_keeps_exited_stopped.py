"""An instance that ended on its own and that its policy leaves down (`exited`, shown
`stopped` by `tenure status`) is left down by an apply's restart step, as one an
operator stopped is, and the plan says so. Was: only the detailed state `stopped`
counted; the step started the exited instance, and the plan said nothing of it."""

from __future__ import annotations

from pathlib import Path

from backend.generation import Generation
from backend.instance import PUBLIC_STATE, State
from backend.testing import FakeOwner, run_generation, until

V1 = '[stacks.s.apps.b]\ncommand = ["b1"]\ninstances = 2\nrestart = "on-failure"\n'
V2 = V1.replace('"b1"', '"b2"')


def test_an_exited_instance_takes_the_definition_and_stays_stopped(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        b1 = gen.sup.instances["s/b/1"]
        gen.sup.on_observation(owner.exit(b1.launch_key, 0))   # done, not restarted
        assert b1.state is State.EXITED and PUBLIC_STATE[b1.state] == "stopped"
        plan = await gen.api.plan_text(V2, "/v2.toml")
        assert plan["changes"] == [{"action": "restart", "app": "s/b", "instances": 2,
                                    "reason": "definition changed: command",
                                    "changed": ["command"], "stay_stopped": [1]}]
        op = gen.api.admit(plan["id"], None)
        await until(lambda: gen.store.operation(op["id"])["outcome"] is not None, "done")
        assert gen.store.operation(op["id"])["outcome"] == "success"
        assert [(p["instance"], p["argv"]) for p in owner.sent("launch")] == [
            (0, ["b1"]), (1, ["b1"]), (0, ["b2"])]
        assert b1.state is State.EXITED and b1.app.command == ("b2",)
    run_generation(tmp_path, V1, body)
