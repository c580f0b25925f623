"""A recovery that adopts a launch made after the instance was last saved (a `tenure
restart` whose backend was killed within the half second before the next save) counts
the exits of the launches in between, from the owner's record of them, and tells each
as an `exit` event at the time it ended. Was: their restarts were rebuilt
(_restarts_since) but `tenure_app_exits_total` stayed one short for good, and the
replaced process had no `exit` event, though the owner had its end on record."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from backend.adopt import adopt_inventory, record_unsaved_exits
from backend.config import parse_config
from backend.events import EventLog
from backend.instance import Instance, State
from backend.instance_types import ExitReason, Timer
from backend.store import BackendStore
from backend.supervisor import Supervisor
from backend.testing import FakeOwner

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\nrestart = "always"\n'


def _saved(generation: int, state: State, exits: dict[ExitReason, int]
           ) -> dict[str, Any]:
    app = parse_config(ONE, "t.toml").app("s", "a")
    assert app is not None
    inst = Instance(app, 0)
    inst.generation, inst.restarts, inst.exits = generation, generation - 1, dict(exits)
    inst.state = state
    if state is State.BACKOFF:
        inst.timers = {Timer.BACKOFF: 5.0}
    if state in (State.RUNNING, State.READY, State.STOPPING, State.RESTARTING):
        inst.pid, inst.start_ticks, inst.launched_at = 100 + generation, 5, 1.0
    return inst.to_wire()


def _ended(generation: int, at: float, code: int | None, sig: int | None,
           stopped: bool = False) -> dict[str, Any]:
    return {"launch_key": f"s/a/0/{generation}", "pid": 100 + generation,
            "state": "exited", "ended_at": at,
            "exit": {"exit_code": code, "signal": sig, "core_dumped": False,
                     "stopped": stopped}}


def _recover(tmp_path: Path, saved: dict[str, Any], live_generation: int,
             rows: list[dict[str, Any]]) -> tuple[Instance, list[dict[str, Any]], FakeOwner]:
    """Adopt the owner's live launch of ``live_generation`` over ``saved``, then record
    the exits of the launches made since the save; (the instance, events, the owner).
    An instance whose counts changed is to be saved."""
    owner = FakeOwner()
    owner.rows = {r["launch_key"]: r for r in rows}
    live = [{"launch_key": f"s/a/0/{live_generation}", "stack": "s", "app": "a",
             "instance": 0, "generation": live_generation, "pid": 4242,
             "start_ticks": 9, "state": "running", "started_at": None}]
    store = BackendStore(str(tmp_path / "backend.db"))
    sup = Supervisor(owner, 1)
    sup.events = EventLog(store, "act-unit")

    async def launch_row(key: str) -> dict[str, Any] | None:
        from protocol.errors import NotFound
        try:
            return dict(await owner.call("inspect", {"launch_key": key}))
        except NotFound:
            return None

    async def main() -> None:
        adoption = adopt_inventory(sup, parse_config(ONE, "t.toml"), {"s/a/0": saved},
                                   live, 1000.0)
        sup.dirty.clear()
        recorded = await record_unsaved_exits(sup, adoption.unsaved, launch_row)
        assert (recorded != []) is ("s/a/0" in sup.dirty), (recorded, sup.dirty)
    try:
        asyncio.run(main())
        sup.events.flush()
        events = sup.events.read(after=0)["events"]
    finally:
        store.close()
    return sup.instances["s/a/0"], events, owner


def test_a_restart_cut_before_the_save_counts_the_replaced_process(tmp_path: Path) -> None:
    inst, events, _ = _recover(tmp_path, _saved(2, State.RESTARTING, {}), 3,
                               [_ended(2, 50.0, None, 15, stopped=True)])
    assert (inst.pid, inst.generation, inst.restarts) == (4242, 3, 2)
    assert inst.exits == {ExitReason.REQUESTED: 1}
    assert [(e["kind"], e["target"], e["at"], e["data"]) for e in events] == [
        ("exit", "s/a/0", 50.0, {"pid": 102, "exit_code": None, "signal": 15,
                                 "core_dumped": False, "requested": True})]


def test_every_launch_between_the_save_and_the_adopted_one_counts(tmp_path: Path) -> None:
    """Saved while running generation 2; it crashed (3), generation 3 crashed (signal),
    generation 4 never had a process (its spawn failed), generation 5 runs."""
    rows = [_ended(2, 50.0, 3, None), _ended(3, 51.0, None, 9),
            {"launch_key": "s/a/0/4", "pid": None, "state": "failed"}]
    inst, events, owner = _recover(
        tmp_path, _saved(2, State.READY, {ExitReason.REQUESTED: 4}), 5, rows)
    assert inst.exits == {ExitReason.REQUESTED: 4, ExitReason.FAILURE: 1,
                          ExitReason.SIGNAL: 1}
    assert [(e["at"], e["data"]["pid"], e["data"]["requested"]) for e in events] == [
        (50.0, 102, False), (51.0, 103, False)]
    assert [p["launch_key"] for p in owner.sent("inspect")] == \
        ["s/a/0/2", "s/a/0/3", "s/a/0/4"]


def test_an_exit_the_saved_record_counted_is_not_counted_again(tmp_path: Path) -> None:
    """Saved in backoff after generation 2 ended (its exit counted): only generation 3,
    launched after the save and ended since, is new; generation 4 runs."""
    inst, events, owner = _recover(
        tmp_path, _saved(2, State.BACKOFF, {ExitReason.FAILURE: 1}), 4,
        [_ended(2, 50.0, 1, None), _ended(3, 51.0, 1, None)])
    assert inst.exits == {ExitReason.FAILURE: 2}
    assert [(e["at"], e["data"]["pid"]) for e in events] == [(51.0, 103)]
    assert [p["launch_key"] for p in owner.sent("inspect")] == ["s/a/0/3"]


def test_the_adopted_launch_saved_as_is_asks_nothing(tmp_path: Path) -> None:
    inst, events, owner = _recover(tmp_path, _saved(3, State.STARTING, {}), 3, [])
    assert inst.exits == {} and events == [] and owner.sent("inspect") == []
