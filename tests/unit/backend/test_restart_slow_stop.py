"""A restart whose stop outlasts its --timeout still starts the instance once it has
stopped. Before, the start was given up with the wait: the app was left stopped. A
fake owner whose stop is held; nothing sleeps but the request's own short timeout."""

from __future__ import annotations

import asyncio
from pathlib import Path

from backend.instance import State
from backend.testing import FakeOwner, api_call, ready_generation, until

TWO = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\ninstances = 2\n'

STOPPING = {"settled": False, "instances": {"s/a/0": "stopping"},
            "reasons": {"s/a/0": "SIGTERM sent 0s ago; SIGKILL in 10s"}}  # the stop held


def test_a_stop_longer_than_the_timeout_still_ends_restarted(tmp_path: Path):
    async def main() -> None:
        owner = FakeOwner()
        async with ready_generation(tmp_path, owner, TWO) as gen:
            insts = gen.sup.instances
            owner.hold("stop")   # the app takes longer to stop than the request waits
            answer = await gen.api.restart(api_call("restart", target="s/a",
                                                    timeout=0.05))
            assert answer.pop("reasons")["s/a/0"].startswith("SIGTERM sent 0s ago")
            assert answer == {"settled": False, "instances": {"s/a/0": "stopping"},
                              "not_restarted": ["s/a/1"], "stopped_at": "s/a/0"}
            assert gen.api.running_steps() == ["restart s/a/0"]   # a drain waits for it
            owner.release("stop")
            await until(lambda: insts["s/a/0"].state is State.READY, "restarted")
            assert insts["s/a/0"].generation == 2
            assert (insts["s/a/1"].state, insts["s/a/1"].generation) == (State.READY, 1)
            await until(lambda: not gen.api.running_steps(), "the step ended")

    asyncio.run(main())


def test_a_start_asked_while_the_stop_still_runs_happens_after_it(tmp_path: Path):
    """Regression: `tenure stop` returned before a long stop ended (--timeout), and a
    `tenure start` then was ignored by the stopping instance: it ended stopped."""
    async def main() -> None:
        owner = FakeOwner()
        async with ready_generation(tmp_path, owner, TWO) as gen:
            insts = gen.sup.instances
            owner.hold("stop")
            stopped = await gen.api.stop(api_call("stop", target="s/a/0", timeout=0.05))
            assert stopped == STOPPING
            started = await gen.api.start(api_call("start", target="s/a/0", timeout=0.05))
            assert started == STOPPING
            assert gen.api.running_steps() == ["start s/a/0"]
            owner.release("stop")
            await until(lambda: insts["s/a/0"].state is State.READY, "started after")
            assert insts["s/a/0"].generation == 2
            await until(lambda: not gen.api.running_steps(), "the step ended")

    asyncio.run(main())
