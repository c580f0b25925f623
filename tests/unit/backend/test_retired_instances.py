"""A removed instance leaves its last generation behind (backend.db ``retired``), so an
instance added back under its key launches after it, in this generation and in the
next one, and never asks the owner for a launch key already spent."""

from __future__ import annotations

import asyncio
from pathlib import Path

from backend.adopt import adopt_inventory
from backend.certify import persist
from backend.config import parse_config
from backend.instance import Instance, State, StopRequested
from backend.store import BackendStore
from backend.supervisor import Supervisor
from backend.testing import FakeOwner, fake_generation, until

TWO = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\nrestart = "always"\n'
       "instances = 2\n")


def test_removed_instances_keep_their_highest_generation(tmp_path: Path) -> None:
    store = BackendStore(str(tmp_path / "backend.db"))
    try:
        store.save_instances({"s/a/1": {"v": 1}}, {})
        store.save_instances({}, {"s/a/1": 3, "s/b/0": 1})
        assert store.instances() == {}
        store.save_instances({}, {"s/a/1": 2})      # an older record never lowers it
        assert store.retired() == {"s/a/1": 3, "s/b/0": 1}
    finally:
        store.close()


async def _remove(gen: object, key: str) -> None:
    sup = gen.sup  # type: ignore[attr-defined]
    sup.feed(key, StopRequested())
    await until(lambda: sup.instances[key].state is State.STOPPED, f"{key} stopped",
                turns=5000)
    sup.forget(key)


def test_an_instance_added_back_launches_after_its_predecessor(tmp_path: Path) -> None:
    async def main() -> None:
        owner = FakeOwner()
        gen = fake_generation(tmp_path, owner, TWO)
        try:
            sup = gen.sup
            assert sup is not None
            await until(lambda: sup.instances["s/a/1"].state is State.READY, "ready",
                        turns=5000)
            sup.instances["s/a/1"].generation = 3     # as after two restarts
            await _remove(gen, "s/a/1")
            app = gen.config.app("s", "a")
            assert app is not None
            sup.ensure(app, 1, True)                   # added back in this generation
            inst = sup.instances["s/a/1"]
            await until(lambda: inst.state is State.READY, "ready again", turns=5000)
            assert (inst.generation, inst.restarts) == (4, 0)
            await _remove(gen, "s/a/1")
            persist(gen)                               # what the drain saves
        finally:
            await gen.close()

        owner2 = FakeOwner()
        gen2 = fake_generation(tmp_path, owner2, TWO)  # the next generation, same home
        try:
            inst2 = gen2.sup.instances["s/a/1"]  # type: ignore[union-attr]
            await until(lambda: inst2.state is State.READY, "started", turns=5000)
            assert (inst2.generation, inst2.restarts) == (5, 0)
            assert [p["launch_key"] for p in owner2.sent("launch")
                    if p["launch_key"].startswith("s/a/1/")] == ["s/a/1/5"]
        finally:
            await gen2.close()
    asyncio.run(main())


def _wire(config_text: str, stack: str, app: str, index: int, generation: int
          ) -> dict[str, object]:
    found = parse_config(config_text, "t.toml").app(stack, app)
    assert found is not None
    inst = Instance(found, index)
    inst.generation = generation
    return inst.to_wire()


def test_a_removal_cut_short_by_a_crash_leaves_its_generation_behind() -> None:
    """Saved instances the applied config no longer has (an app taken out, an instance
    scaled away, the backend killed before their removal was written) are not restored:
    their generation becomes their key's floor, and their records go at the next save,
    unless a launch of one still runs (its operation resumes and stops it)."""
    before = TWO + '[stacks.s.apps.gone]\ncommand = ["sleep", "1000"]\n'
    saved = {"s/a/0": _wire(before, "s", "a", 0, 2), "s/a/1": _wire(before, "s", "a", 1, 5),
             "s/gone/0": _wire(before, "s", "gone", 0, 3)}
    after = parse_config(TWO.replace("instances = 2", "instances = 1"), "t.toml")
    sup = Supervisor(FakeOwner(), 1)
    sup.retired = {"s/gone/0": 7}     # recorded earlier, higher: kept
    adopt_inventory(sup, after, saved, [], 0.0)
    assert set(sup.instances) == {"s/a/0"}
    assert sup.retired == sup.removed == {"s/a/1": 5, "s/gone/0": 7}

    live = [{"launch_key": "s/a/1/5", "stack": "s", "app": "a", "instance": 1,
             "generation": 5, "pid": 4242, "start_ticks": 1, "state": "running"}]
    sup = Supervisor(FakeOwner(), 1)
    adopt_inventory(sup, after, saved, live, 0.0)
    assert sup.instances["s/a/1"].pid == 4242 and "s/a/1" not in sup.removed
    assert sup.retired == {"s/a/1": 5, "s/gone/0": 3}


def test_a_lower_generation_never_lowers_a_floor() -> None:
    sup = Supervisor(FakeOwner(), 1)
    sup.retired = {"s/a/0": 9}
    app = parse_config(TWO, "t.toml").app("s", "a")
    assert app is not None
    sup.instances["s/a/0"] = Instance(app, 0)      # an older release's, at generation 0
    sup.forget("s/a/0")
    assert sup.retired == sup.removed == {"s/a/0": 9}
