"""A removed instance leaves its last generation behind (backend.db ``retired``), so an
instance added back under its key launches after it, in this generation and in the
next one, and never asks the owner for a launch key already spent."""

from __future__ import annotations

import asyncio
from pathlib import Path

from backend.certify import persist
from backend.instance import State, StopRequested
from backend.store import BackendStore
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
