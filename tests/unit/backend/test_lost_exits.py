"""record_lost_exits: the exit of each instance whose process ended while no backend
watched comes from the owner's row of its launch, at the time the owner recorded it,
requested when the owner stopped it or the instance was being stopped; rows that are
missing or name another process record nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from backend.adopt import record_lost_exits
from backend.events import EventLog
from backend.instance import State
from backend.instance_types import ExitReason
from backend.testing import FakeOwner, run_generation

FIVE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\ninstances = 5\n'


def _ended(pid: int, at: float, code: int | None, sig: int | None, **more: Any
           ) -> dict[str, Any]:
    return {"pid": pid, "ended_at": at, "state": "exited",
            "exit": {"exit_code": code, "signal": sig, "core_dumped": False, **more}}


def test_each_lost_exit_is_recorded_from_the_owners_row(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        sup = gen.sup
        inst = [sup.instances[f"s/a/{i}"] for i in range(5)]
        inst[4].state = State.STOPPING                 # a stop was on its way
        rows = {inst[0].launch_key: _ended(inst[0].pid, 100.0, None, 15, stopped=True),
                inst[1].launch_key: _ended(inst[1].pid, 101.0, 3, None),  # an older owner
                inst[2].launch_key: None,                                  # never known
                inst[3].launch_key: _ended(inst[3].pid + 1, 102.0, 0, None),
                inst[4].launch_key: _ended(inst[4].pid, 103.0, 0, None)}
        events = sup.events = EventLog(gen.store, gen.activation)

        async def launch_row(key: str) -> dict[str, Any] | None:
            await asyncio.sleep(0)
            return rows[key]
        done = await record_lost_exits(sup, set(), launch_row)
        assert done == ["s/a/0", "s/a/1", "s/a/4"]
        events.flush()
        got = [(e["target"], e["at"], e["data"]) for e in events.read(after=0)["events"]]
        assert got == [
            ("s/a/0", 100.0, {"pid": inst[0].pid, "exit_code": None, "signal": 15,
                              "core_dumped": False, "requested": True}),
            ("s/a/1", 101.0, {"pid": inst[1].pid, "exit_code": 3, "signal": None,
                              "core_dumped": False, "requested": False}),
            ("s/a/4", 103.0, {"pid": inst[4].pid, "exit_code": 0, "signal": None,
                              "core_dumped": False, "requested": True})]
        assert [i.exits for i in inst] == [{ExitReason.REQUESTED: 1},
                                           {ExitReason.FAILURE: 1}, {}, {},
                                           {ExitReason.REQUESTED: 1}]

    run_generation(tmp_path, FIVE, body)


def test_a_live_launch_is_not_asked_about(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        live = {i.launch_key for i in gen.sup.instances.values()}

        async def launch_row(key: str) -> dict[str, Any] | None:
            raise AssertionError(f"asked about live launch {key}")
        assert await record_lost_exits(gen.sup, live, launch_row) == []

    run_generation(tmp_path, FIVE, body)


def test_a_launch_made_after_the_inventory_was_read_is_not_lost(tmp_path: Path) -> None:
    """Adoption reads the owner's inventory, then replays the owner's events, which may
    launch an instance again (an exit the owner reports as its own stop): that launch is
    not in the inventory it read, but it is no loss. Was: relaunch_lost started the
    instance once more, and two processes ran for it."""
    from backend.adopt import relaunch_lost
    from backend.instance import OwnerStopped

    async def body(gen: Any, owner: FakeOwner) -> None:
        sup = gen.sup
        live = {i.launch_key for i in sup.instances.values()}
        known = {k: i.launch_key for k, i in sup.instances.items()}
        inst = sup.instances["s/a/0"]
        sup.feed("s/a/0", OwnerStopped(None, 15))          # the replay launches it again
        assert inst.state is State.STARTING and inst.launch_key not in live
        launches = len(owner.sent("launch"))
        assert relaunch_lost(sup, live, set(), known) == []
        assert sup.instances["s/a/0"] is inst and len(owner.sent("launch")) == launches
        assert relaunch_lost(sup, live, set()) == ["s/a/0"]   # what it did without known

    run_generation(tmp_path, FIVE, body)
