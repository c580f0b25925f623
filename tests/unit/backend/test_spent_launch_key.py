"""A launch key the owner has already used for a launch that ended (a backend whose own
state is older than the owner's: backend.db lost, or recovery from an older checkpoint,
counts generations again from where it knows). The owner answers such a key with the
ended launch; the backend must not report that launch's pid as running. It records why
and starts the instance again under the next generation."""

from __future__ import annotations

import asyncio
from pathlib import Path

from backend.instance import State
from backend.testing import FakeOwner, fake_generation, until

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def test_a_spent_launch_key_is_not_taken_for_a_running_process(tmp_path: Path) -> None:
    async def main() -> None:
        owner = FakeOwner()
        owner.rows["s/a/0/1"] = {   # generation 1 ran and ended before this backend
            "launch_key": "s/a/0/1", "stack": "s", "app": "a", "instance": 0,
            "generation": 1, "pid": 99, "start_ticks": 990, "state": "exited",
            "exit": {"exit_code": 0, "signal": None, "core_dumped": False}}
        gen = fake_generation(tmp_path, owner, ONE)
        try:
            inst = gen.sup.instances["s/a/0"]
            await until(lambda: inst.state is State.READY and inst.generation > 1,
                        "started again under a new generation", turns=5000)
            assert inst.pid != 99 and "s/a/0/1" not in owner.live
            assert inst.last_error is not None and "used before" in inst.last_error.text
            assert owner.sent("launch")[0]["launch_key"] == "s/a/0/1"
        finally:
            await gen.close()
    asyncio.run(main())
