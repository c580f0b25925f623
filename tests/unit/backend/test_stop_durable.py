"""A `tenure stop STACK` asks its levels one after the other, and the levels not asked
yet are recorded in backend.db (``stops_to_ask``) before the first is asked: a stop cut
by the end of its generation (a crash, a handoff) is finished, in order, by the
generation that serves next, or by this one after an aborted handoff. Before, they lived
only in memory: the apps the operator asked to stop kept running for good, and nothing
said so. A fake owner whose stops of one app are held; real SQLite; nothing sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.generation import Generation
from backend.instance import State
from backend.store import BackendStore
from backend.testing import FakeOwner, api_call, run_generation, until
from protocol.errors import ShuttingDown, StaleEpoch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_stop_order import BOUND, CONFIG  # `tenure stop s`: web, worker; api; db

Step = Callable[[Generation, FakeOwner], Awaitable[None]]


class Slow(FakeOwner):
    """Stops of ``app`` wait until ``trapped`` is set; every other call is answered at
    once. ``stops``: the apps asked to stop, in order (each once)."""

    def __init__(self, app: str) -> None:
        super().__init__()
        self.app = app
        self.trapped = asyncio.Event()
        self.stops: list[str] = []

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   epoch: int | None = None, timeout: float | None = None, **kw: Any) -> Any:
        if method == "stop":
            app = dict(params or {})["launch_key"].split("/")[1]
            self.stops += [app] if app not in self.stops else []
            if app == self.app:
                await self.trapped.wait()
        return await super().call(method, params, epoch=epoch, timeout=timeout, **kw)


def slow(owner: FakeOwner) -> Slow:
    assert isinstance(owner, Slow)
    return owner


def state(gen: Generation, key: str) -> State:
    return gen.sup.instances[key].state


def recorded(home: Path) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(home / "backend.db")) as db:
        return db.execute("SELECT key, level FROM stops_to_ask ORDER BY key").fetchall()


def cut_stop(home: Path, meanwhile: Step | None = None) -> None:
    """A generation is asked `tenure stop s`, and ends (a crash: nothing it held in
    memory goes on) while web still stops, so before api and db were asked; with
    ``meanwhile`` done before that."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        stop = asyncio.create_task(gen.api.stop(api_call("stop", target="s",
                                                         timeout=300.0)))
        await until(lambda: state(gen, "s/web/0") is State.STOPPING, "web stopping")
        if meanwhile is not None:
            await meanwhile(gen, owner)
        stop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stop
        assert slow(owner).stops[:2] == ["web", "worker"] and "db" not in slow(owner).stops
        slow(owner).trapped.set()
    run_generation(home, CONFIG, body, owner=Slow("web"))


def next_generation(home: Path, body: Step, config: str = CONFIG) -> None:
    """The generation that serves next over the same backend.db (its apps all up, as
    the fake owner starts them), resumed as a generation's start resumes; ``body``
    then. Stops of api are held until ``trapped`` is set."""
    async def resumed(gen: Generation, owner: FakeOwner) -> None:
        await gen.api.resume_operations()
        await body(gen, owner)
    run_generation(home, config, resumed, owner=Slow("api"))


async def finished(gen: Generation) -> None:
    """Wait until the resumed stop has asked its last level."""
    await until(lambda: gen.api._stops_finisher is None or gen.api._stops_finisher.done(),
                "the resumed stop finished")


def test_a_plain_stop_cut_by_a_crash_is_finished_in_order_by_the_next_generation(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cut_stop(tmp_path)
    assert recorded(tmp_path) == [("s/api/0", 1), ("s/api/1", 1), ("s/db/0", 2)]

    async def body(gen: Generation, owner: FakeOwner) -> None:
        await until(lambda: state(gen, "s/api/0") is State.STOPPING, "api stopping")
        for _ in range(50):   # the turns in which db would have been asked
            await asyncio.sleep(0)
        assert slow(owner).stops == ["api"] and state(gen, "s/db/0") is State.READY
        assert recorded(tmp_path) == [("s/db/0", 2)]   # removed as they are asked
        slow(owner).trapped.set()
        await until(lambda: state(gen, "s/db/0") is State.STOPPED, "db stopped")
        assert slow(owner).stops == ["api", "db"]
        await finished(gen)
        assert recorded(tmp_path) == []
        assert state(gen, "t/solo/0") is State.READY
    with caplog.at_level(logging.WARNING, "tenure.backend"):
        next_generation(tmp_path, body)
    said = [r.getMessage() for r in caplog.records if "tenure stop s" in r.getMessage()]
    assert said == ["`tenure stop s` was cut before it asked every app (its generation "
                    "ended, or a handoff began): stopping the 3 instances it had not "
                    "asked, in the reverse of their start order"], said


def test_a_start_asked_before_the_cut_keeps_its_instance_up_after_the_resume(
        tmp_path: Path) -> None:
    """The latest command wins, after a crash as in memory: `tenure start s/db` while
    the stop waited for web."""
    async def start_db(gen: Generation, owner: FakeOwner) -> None:
        started = await gen.api.start(api_call("start", target="s/db", timeout=5.0))
        assert started["settled"] is True, started
    cut_stop(tmp_path, start_db)
    assert recorded(tmp_path) == [("s/api/0", 1), ("s/api/1", 1)]

    async def body(gen: Generation, owner: FakeOwner) -> None:
        slow(owner).trapped.set()
        await until(lambda: state(gen, "s/api/1") is State.STOPPED, "api stopped")
        await finished(gen)
        assert slow(owner).stops == ["api"] and state(gen, "s/db/0") is State.READY
    next_generation(tmp_path, body)


def test_an_apply_that_restarts_an_app_before_the_cut_keeps_it_up_after_the_resume(
        tmp_path: Path) -> None:
    """An apply's restart of api is a later command too: api is left running."""
    async def restart_api(gen: Generation, owner: FakeOwner) -> None:
        new = CONFIG.replace('after = ["db"]\ninstances = 2',
                             'after = ["db"]\ninstances = 2\nenv = { V = "2" }')
        plan = await gen.api.plan(api_call("plan", config_text=new, source="v2.toml"))
        op = await gen.api.apply(api_call("apply", plan=plan["id"], request_id=None))
        await until(lambda: gen.store.operation(op["id"])["outcome"] is not None,
                    "the apply ended", turns=5000)
        assert gen.store.operation(op["id"])["outcome"] == "success"
    cut_stop(tmp_path, restart_api)
    assert recorded(tmp_path) == [("s/db/0", 2)]

    async def body(gen: Generation, owner: FakeOwner) -> None:
        await until(lambda: state(gen, "s/db/0") is State.STOPPED, "db stopped")
        await finished(gen)
        assert slow(owner).stops == ["db"]
        assert state(gen, "s/api/0") is state(gen, "s/api/1") is State.READY
    next_generation(tmp_path, body)


def test_an_app_removed_by_an_apply_is_not_stopped_by_the_resume(tmp_path: Path) -> None:
    """The config the next generation serves no longer has api (nor web, which started
    after it): api's records are dropped, db is stopped all the same."""
    cut_stop(tmp_path)
    smaller = ('[stacks.s.apps.db]\ncommand = ["sleep", "1000"]\n'
               '[stacks.s.apps.worker]\ncommand = ["sleep", "1000"]\nafter = ["db"]\n')

    async def body(gen: Generation, owner: FakeOwner) -> None:
        await until(lambda: state(gen, "s/db/0") is State.STOPPED, "db stopped")
        await finished(gen)
        assert slow(owner).stops == ["db"] and recorded(tmp_path) == []
        assert state(gen, "s/worker/0") is State.READY
    next_generation(tmp_path, body, smaller)


def test_a_damaged_row_stops_nothing_and_says_state_corrupt(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cut_stop(tmp_path)
    with contextlib.closing(sqlite3.connect(tmp_path / "backend.db")) as db, db:
        db.execute("UPDATE stops_to_ask SET level = 'two' WHERE key = 's/db/0'")

    async def body(gen: Generation, owner: FakeOwner) -> None:
        slow(owner).trapped.set()
        await until(lambda: state(gen, "s/api/1") is State.STOPPED, "api stopped")
        await finished(gen)
        gen.api.pause()
        gen.api.unpause()   # an aborted handoff resumes again: said once
        await finished(gen)
        assert slow(owner).stops == ["api"] and state(gen, "s/db/0") is State.READY
    with caplog.at_level(logging.ERROR, "tenure.backend"):
        next_generation(tmp_path, body)
    said = [r.getMessage() for r in caplog.records if "stops_to_ask" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("STATE_CORRUPT"), said
    assert recorded(tmp_path) == [("s/db/0", "two")]   # left as it is


def test_a_drain_cuts_a_plain_stop_and_an_abort_finishes_it(tmp_path: Path) -> None:
    """The handoff's answer names what was not asked, and says who stops it; the
    handoff aborted, this generation does."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        stop = asyncio.create_task(gen.api.stop(api_call("stop", target="s",
                                                         timeout=300.0)))
        await until(lambda: state(gen, "s/web/0") is State.STOPPING, "web stopping")
        gen.api.pause()
        async with asyncio.timeout(BOUND):
            with pytest.raises(ShuttingDown) as cut:
                await stop
        assert cut.value.data["not_stopped"] == ["s/api/0", "s/api/1", "s/db/0"]
        assert "the generation that serves next stops them" in cut.value.msg
        assert "run the command again" not in cut.value.msg
        gen.api.unpause()
        finisher = gen.api._stops_finisher
        gen.api.unpause()   # twice over: one finisher
        assert finisher is not None and gen.api._stops_finisher is finisher
        for _ in range(50):
            await asyncio.sleep(0)
        assert slow(owner).stops == ["web", "worker"]   # api waits for web
        slow(owner).trapped.set()
        await until(lambda: state(gen, "s/db/0") is State.STOPPED, "db stopped")
        await finished(gen)
        assert slow(owner).stops == ["web", "worker", "api", "db"]
        assert recorded(tmp_path) == []
    run_generation(tmp_path, CONFIG, body, owner=Slow("web"))


# -- the records as the store keeps them ----------------------------------------------

def test_records_are_forgotten_by_their_generation_or_by_a_later_command(
        tmp_path: Path) -> None:
    store = BackendStore(str(tmp_path / "backend.db"))
    try:
        store.want_stops([["s/a/0"], ["s/b/0", "s/b/1"]], "stop s", "act-1")
        store.drop_stops(["s/a/0"], "act-2")        # not its record: kept
        store.drop_stops(["s/b/0"], None)           # a later command took it
        assert store.stops_to_ask() == ([("s/a/0", 1, "stop s"), ("s/b/1", 2, "stop s")], 0)
        store.want_stops([["s/b/1"]], "stop s/b", "act-1", asked=["s/a/0"])
        assert store.stops_to_ask() == ([("s/b/1", 1, "stop s/b")], 0)
        store.claim_stops(["s/b/1"], "act-2")
        store.drop_stops(["s/b/1"], "act-1")        # taken over by act-2: kept
        store.drop_stops(["s/b/1"], "act-2")
        assert store.stops_to_ask() == ([], 0)
    finally:
        store.close()


def test_the_next_holder_takes_the_stops_over_unless_a_release_without_them_ran_between(
        tmp_path: Path) -> None:
    """A handoff back to a release that does not know stops_to_ask, then forward again:
    that release took commands without forgetting the rows (it started the apps, say),
    so they must not stop anything now."""
    store = BackendStore(str(tmp_path / "backend.db"))
    try:
        store.hold("owner-1", 1, "act-1")
        store.want_stops([["s/a/0"]], "stop s", "act-1")
        store.hold("owner-1", 2, "act-2")              # the next generation: taken over
        rows = store.db.execute("SELECT key, activation FROM stops_to_ask").fetchall()
        assert rows == [("s/a/0", "act-2")]
        with store.tx() as db:                         # an older release held it since
            db.execute("UPDATE holder SET epoch = 3, activation = 'old-release-gen'")
        store.hold("owner-1", 4, "act-4")
        assert store.stops_to_ask() == ([], 0)
    finally:
        store.close()


def test_a_stale_generation_records_and_forgets_nothing(tmp_path: Path) -> None:
    store = BackendStore(str(tmp_path / "backend.db"))
    newer = BackendStore(str(tmp_path / "backend.db"))
    try:
        store.hold("owner-1", 1, "act-1")
        newer.hold("owner-1", 2, "act-2")
        newer.want_stops([["s/a/0"]], "stop s", "act-2")
        for write in (lambda: store.want_stops([["s/b/0"]], "stop s", "act-1"),
                      lambda: store.drop_stops(["s/a/0"], None),
                      lambda: store.claim_stops(["s/a/0"], "act-1")):
            with pytest.raises(StaleEpoch):
                write()
        assert newer.stops_to_ask() == ([("s/a/0", 1, "stop s")], 0)
    finally:
        store.close()
        newer.close()


@given(st.lists(st.tuples(*[st.one_of(st.none(), st.integers(-2**63, 2**63 - 1),
                                       st.floats(allow_nan=False), st.text(max_size=8),
                                       st.binary(max_size=8))] * 5), max_size=6))
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_row_reads_back_as_a_stop_or_as_damaged(tmp_path: Path,
                                                     rows: list[tuple[Any, ...]]) -> None:
    store = BackendStore(str(tmp_path / "fuzz.db"))
    try:
        with store.tx() as db:
            db.execute("DELETE FROM stops_to_ask")
            db.executemany("INSERT OR IGNORE INTO stops_to_ask VALUES (?, ?, ?, ?, ?)",
                           rows)
            (n,) = db.execute("SELECT count(*) FROM stops_to_ask").fetchone()
        read, damaged = store.stops_to_ask()
        assert len(read) + damaged == n
        for key, level, command in read:
            assert type(key) is str and type(level) is int and level >= 1
            assert type(command) is str
    finally:
        store.close()
