"""A generation fenced off on disk (a newer one claimed backend.db's apps' state) records
no start wanted once down: the newer generation's record of that start is left as it is,
and this generation is fenced at once. Was: want_start did not check the claim, so a
stale generation's `tenure restart` took the record over, and when the owner then
refused its stop (fenced), forgot it as its own: the newer generation's start was gone,
and the app it had stopped stayed down. Fake owner; real SQLite."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from backend.generation import Generation
from backend.instance import Start, State, StopRequested
from backend.store import BackendStore
from backend.testing import FakeOwner, api_call, run_generation, until
from protocol.errors import ShuttingDown, StaleEpoch, TenureError

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def _newer(gen: Generation, tmp_path: Path, owner: FakeOwner) -> BackendStore:
    """A newer generation that holds epoch + 1 and wants s/a/0 started once down."""
    gen.store.hold("owner-1", owner.epoch, gen.activation)
    newer = BackendStore(str(tmp_path / "backend.db"))
    newer.hold("owner-1", owner.epoch + 1, "act-newer")
    newer.want_start("s/a/0", "act-newer")
    owner.epoch += 1
    return newer


def test_a_stale_store_refuses_to_record_a_start(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        newer = _newer(gen, tmp_path, owner)
        try:
            with pytest.raises(StaleEpoch):
                gen.store.want_start("s/a/0", gen.activation, ("after-stop", 1.0))
            assert newer.wanted_starts() == ["s/a/0"]
            assert newer.start_waits() == {}      # the newer one's record said no wait
        finally:
            newer.close()
    run_generation(tmp_path, ONE, body)


def test_a_stale_restart_leaves_the_newer_generations_start(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        newer = _newer(gen, tmp_path, owner)
        try:
            with pytest.raises(TenureError):
                await asyncio.wait_for(gen.api.restart(api_call(
                    "restart", target="s/a", timeout=5.0)), 5)
            assert newer.wanted_starts() == ["s/a/0"]   # was: [] (taken over, forgotten)
            assert gen.sup.fenced                        # told at once, as a save is
            assert not owner.sent("stop")                # nothing sent on its behalf
            assert gen.sup.instances["s/a/0"].state is State.READY   # not left stopping
        finally:
            newer.close()
    run_generation(tmp_path, ONE, body)


ORDERED = ONE + '\n[stacks.s.apps.b]\ncommand = ["sleep", "1000"]\nafter = ["a"]\n'


def test_a_stale_ordered_start_is_refused_and_fences(tmp_path: Path):
    """A start held for its ``after`` apps is recorded too: stale, it is refused (not
    started unordered, as when the write fails for want of disk) and fences."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        gen.sup.feed("s/b/0", StopRequested())
        await until(lambda: gen.sup.instances["s/b/0"].state is State.STOPPED, "stopped")
        newer = _newer(gen, tmp_path, owner)
        launches = len(owner.sent("launch"))
        try:
            with pytest.raises(ShuttingDown):
                gen.sup.feed("s/b/0", Start())
            assert gen.sup.fenced and newer.wanted_starts() == ["s/a/0"]
            assert gen.sup.instances["s/b/0"].state is State.STOPPED
            assert len(owner.sent("launch")) == launches
        finally:
            newer.close()
    run_generation(tmp_path, ORDERED, body)
