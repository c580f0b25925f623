"""A generation fenced off while it serves (no drain: a guardian that could not reach
it started the next generation): whichever way it learns of the newer epoch (an owner
call refused, the heartbeat's status, the certificate's inventory), it stands down and
leaves, deciding and saving nothing more. Fake owner and server; real SQLite."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from backend.certify import persist, publish_certificate
from backend.drainstate import TRANSITIONS, Action, Event, Stage
from backend.generation import Generation
from backend.instance import State, StopRequested
from backend.testing import FakeOwner, api_call, run_generation, until
from protocol.errors import ShuttingDown, StaleEpoch

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def test_fenced_while_serving_stands_down_and_leaves() -> None:
    assert TRANSITIONS[Stage.SERVING, Event.FENCED] == (Stage.STOOD_DOWN, Action.LEAVE)


def _run(tmp_path: Path, learn: Any) -> None:
    """``learn(gen, owner)``: how the generation hears of the fence that just landed."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        persist(gen)                   # saved as ready
        owner.epoch += 1               # the next generation's fence landed
        await learn(gen, owner)
        assert gen.stood_down and gen.sup.fenced and gen.draining
        assert gen._done.is_set() and gen.server.draining
        # a fenced supervisor decides nothing more
        with pytest.raises(ShuttingDown):
            gen.sup.feed("s/a/0", StopRequested())
        persist(gen)
        saved = gen.store.instances()["s/a/0"]
        assert saved["state"] == "ready", saved
    run_generation(tmp_path, ONE, body)


def test_a_restart_the_owner_refuses_is_not_saved(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        task = asyncio.ensure_future(gen.api.restart(api_call("restart", target="s/a",
                                                              timeout=30.0)))
        await until(lambda: gen.sup.fenced, "fenced by the refused stop")
        with pytest.raises(ShuttingDown):   # at once, not after its timeout
            await asyncio.wait_for(task, 5)
        # its state moved to stopping in memory; backend.db keeps what it was
        assert gen.sup.instances["s/a/0"].state is State.STOPPING
    _run(tmp_path, body)


def test_the_heartbeat_epoch_fences(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        gen._owner_status({"epoch": owner.epoch})
    _run(tmp_path, body)


def test_the_certificate_inventory_epoch_fences(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        assert await publish_certificate(gen) is False
    _run(tmp_path, body)


def test_a_generation_held_for_a_handoff_is_not_stood_down_by_its_heartbeat(tmp_path: Path):
    """The guardian fences the owner for its candidate between the checkpoint and the
    incumbent's retirement: a heartbeat in that window is the handoff going well."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        assert (await gen.drain(30.0))["drained"] is True
        gen.checkpoint(str(tmp_path / "act.checkpoint.json"))
        owner.epoch += 1
        gen._owner_status({"epoch": owner.epoch})
        assert gen.drain_state.stage is Stage.CHECKPOINTED and not gen._done.is_set()
        gen.retire()
        assert gen.drain_state.stage is Stage.RETIRING
    run_generation(tmp_path, ONE, body)


def test_backend_db_refuses_a_save_from_a_generation_another_one_replaced(tmp_path: Path):
    """The gap before a fenced generation learns of the fence (a stopped one's timers
    fire first when it is continued, and its save may come before the owner's refusal):
    backend.db's holder row, claimed by each generation at its start, refuses the save;
    the generation then stands down."""
    from backend.store import BackendStore

    async def body(gen: Generation, owner: FakeOwner) -> None:
        gen.store.hold("owner-1", owner.epoch, gen.activation)
        persist(gen)
        newer = BackendStore(str(tmp_path / "backend.db"))
        try:
            newer.hold("owner-1", owner.epoch + 1, "act-newer")
            newer.save_instances({"s/a/0": {**newer.instances()["s/a/0"],
                                            "restarts": 7}}, {})
            gen.sup.feed("s/a/0", StopRequested())       # not told of the fence yet
            persist(gen)
            assert gen.stood_down and gen.sup.fenced
            assert newer.instances()["s/a/0"]["restarts"] == 7   # theirs, untouched
            with pytest.raises(StaleEpoch, match="act-newer at epoch 2"):
                gen.store.hold("owner-1", owner.epoch, gen.activation)
        finally:
            newer.close()
    run_generation(tmp_path, ONE, body)


def test_a_new_owner_instance_takes_the_state_whatever_its_epoch(tmp_path: Path):
    from backend.store import BackendStore
    store = BackendStore(str(tmp_path / "backend.db"))
    try:
        store.hold("owner-1", 9, "act-a")
        store.hold("owner-2", 1, "act-b")     # `tenure down` and `up`: epochs start over
        with pytest.raises(StaleEpoch):
            store.hold("owner-2", 0, "act-c")
        store.hold("owner-2", 1, "act-d")     # the same epoch: a retried start
    finally:
        store.close()
