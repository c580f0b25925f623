"""A launch key the owner has already used for a launch that ended (a backend whose own
state is older than the owner's: backend.db lost, or recovery from an older checkpoint,
counts generations again from where it knows). The owner answers such a key with the
ended launch; the backend must not report that launch's pid as running: it takes it as
started and ended (its exit as recorded), so the restart policy starts the instance
again under the next generation, once, whether or not the exit's observation comes too.
A launch that ended without ever having a process is a failed launch that says why."""

from __future__ import annotations

import asyncio
from pathlib import Path

from backend.instance import State
from backend.testing import FakeOwner, fake_generation, until

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\nrestart = "always"\n'
EXITED = {"exit_code": None, "signal": 15, "core_dumped": False}


def spent(owner: FakeOwner, **row: object) -> None:
    """Generation 1 of s/a/0 ran and ended before this backend."""
    owner.rows["s/a/0/1"] = {"launch_key": "s/a/0/1", "stack": "s", "app": "a",
                             "instance": 0, "generation": 1, "pid": 99,
                             "start_ticks": 990, "state": "exited", "exit": EXITED, **row}


def test_a_spent_launch_key_is_not_taken_for_a_running_process(tmp_path: Path) -> None:
    async def main() -> None:
        owner = FakeOwner()
        spent(owner)
        gen = fake_generation(tmp_path, owner, ONE)
        try:
            inst = gen.sup.instances["s/a/0"]
            await until(lambda: inst.state is State.READY and inst.generation > 1,
                        "started again under a new generation", turns=5000)
            for _ in range(50):   # and no second restart follows
                await asyncio.sleep(0)
            assert inst.generation == 2 and inst.pid != 99 and len(owner.live) == 1
            assert inst.last_exit is not None and inst.last_exit.signal == 15
            assert owner.sent("launch")[0]["launch_key"] == "s/a/0/1"
        finally:
            await gen.close()
    asyncio.run(main())


def test_the_exit_observed_too_starts_it_once(tmp_path: Path) -> None:
    """The ended launch's exit is also in the owner's ring (a recovery): observed while
    the launch is in flight, and again after the restart; one process in the end."""
    exit_event = {"kind": "exit", "launch_key": "s/a/0/1", "pid": 99, **EXITED}

    async def main() -> None:
        owner = FakeOwner()
        spent(owner)
        owner.hold("launch")
        gen = fake_generation(tmp_path, owner, ONE)
        try:
            inst = gen.sup.instances["s/a/0"]
            await until(lambda: bool(owner.sent("launch")), "launch sent")
            gen.sup.on_observation(exit_event)   # before the owner's answer
            owner.release("launch")
            await until(lambda: inst.state is State.READY and inst.generation > 1,
                        "started again", turns=5000)
            gen.sup.on_observation(exit_event)   # and once more, long after
            for _ in range(50):
                await asyncio.sleep(0)
            assert inst.generation == 2 and inst.state is State.READY
            assert len(owner.live) == 1 and inst.pid == owner.live["s/a/0/2"]["pid"]
        finally:
            await gen.close()
    asyncio.run(main())


def test_a_spent_key_without_a_process_is_a_failed_launch(tmp_path: Path) -> None:
    async def main() -> None:
        owner = FakeOwner()
        spent(owner, state="lost", pid=None, start_ticks=None, exit=None)
        gen = fake_generation(tmp_path, owner, ONE)
        try:
            inst = gen.sup.instances["s/a/0"]
            await until(lambda: inst.state is State.READY and inst.generation > 1,
                        "started again", turns=5000)
            assert inst.last_error is not None and "used before" in inst.last_error.text
            assert inst.generation == 2 and len(owner.live) == 1
        finally:
            await gen.close()
    asyncio.run(main())
