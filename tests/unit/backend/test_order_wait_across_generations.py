"""A start held for its ``after`` apps (backend.start_order) is recorded in backend.db as an
order wait with its wall-clock deadline (start_waits), and the next generation
(backend.adopt.resume_wanted_starts) holds it the same way for what is left of it: not
for the instance's stop policy (which started it ~25 s after a handoff while its
dependency was still coming up), nor for a fresh ORDER_WAIT. A record without a wait
(from a release before start_waits) is taken over as before. Fake owner; real SQLite."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from backend.adopt import resume_wanted_starts
from backend.after_stop import Wait, WaitKind
from backend.instance import Start, State, StopRequested
from backend.start_order import ORDER_WAIT
from backend.store import BackendStore
from backend.testing import FakeOwner, run_generation, until_time

ORDERED = """
[stacks.o.apps.db]
command = ["sleep", "1000"]
ready = { kind = "delay", delay = 60 }

[stacks.o.apps.api]
command = ["sleep", "1000"]
after = ["db"]
"""
UNPROBED = ORDERED.replace('ready = { kind = "delay", delay = 60 }\n', "")
API = "o/api/0"


async def _db_coming_up(sup: Any) -> None:
    """api stopped, db started and running, never ready (within the test)."""
    await until_time(lambda: API in sup.instances and "o/db/0" in sup.instances, "both")
    for key in (API, "o/db/0"):
        sup.feed(key, StopRequested())
    await until_time(lambda: all(i.state is State.STOPPED for i in sup.instances.values()),
                "both stopped")
    sup.feed("o/db/0", Start())
    await until_time(lambda: sup.instances["o/db/0"].state is State.RUNNING, "db running")


def test_a_held_start_is_recorded_as_an_order_wait_with_its_deadline(tmp_path: Path):
    async def body(gen: Any, owner: FakeOwner) -> None:
        await _db_coming_up(gen.sup)
        before = time.time()
        gen.sup.feed(API, Start())
        waits = gen.store.start_waits()
        assert list(waits) == [API] and waits[API][0] == "order"
        assert before + ORDER_WAIT <= waits[API][1] <= time.time() + ORDER_WAIT
        gen.sup.feed(API, StopRequested())            # withdrawn: forgotten with its start
        assert gen.store.wanted_starts() == [] and gen.store.start_waits() == {}

    run_generation(tmp_path, ORDERED, body, ready=False)


def test_the_next_generation_holds_it_for_what_is_left_of_its_deadline(tmp_path: Path):
    async def body(gen: Any, owner: FakeOwner) -> None:
        sup = gen.sup
        await _db_coming_up(sup)
        deadline = time.time() + 0.3             # what the previous generation left
        gen.store.want_start(API, "act-before", Wait(WaitKind.ORDER, deadline).to_row())
        loop = asyncio.get_running_loop()
        began = loop.time()
        assert resume_wanted_starts(sup, gen.store, stopped_stacks=set()) == [API]
        await asyncio.sleep(0.1)
        assert sup.instances[API].state is State.STOPPED         # not stopped: held
        assert sup.reason(API) == "starts once o/db/0 is ready"
        await until_time(lambda: sup.instances[API].state is not State.STOPPED,
                    "started all the same once its deadline passed", within=3.0)
        assert loop.time() - began >= 0.25
        assert sup.instances["o/db/0"].state is State.RUNNING    # still not ready
        assert gen.store.wanted_starts() == [] and gen.store.start_waits() == {}

    run_generation(tmp_path, ORDERED, body, ready=False)


def test_taken_over_it_keeps_its_deadline_and_starts_once_nothing_comes_up(tmp_path: Path):
    async def body(gen: Any, owner: FakeOwner) -> None:
        sup = gen.sup
        await _db_coming_up(sup)
        deadline = time.time() + 200
        gen.store.want_start(API, "act-before", Wait(WaitKind.ORDER, deadline).to_row())
        resume_wanted_starts(sup, gen.store, stopped_stacks=set())
        assert gen.store.start_waits() == {API: ("order", deadline)}   # not started over
        assert gen.store.db.execute("SELECT activation FROM starts_after_stop"
                                    ).fetchall() == [(gen.activation,)]
        await asyncio.sleep(0.05)
        assert sup.instances[API].state is State.STOPPED
        sup.feed("o/db/0", StopRequested())      # nothing left to wait for
        await until_time(lambda: sup.instances[API].state is not State.STOPPED, "api started")

    run_generation(tmp_path, ORDERED, body, ready=False)


def test_an_order_wait_whose_instance_was_started_meanwhile_is_forgotten(tmp_path: Path):
    async def body(gen: Any, owner: FakeOwner) -> None:
        gen.store.want_start(API, "act-before",
                             Wait(WaitKind.ORDER, time.time() + 200).to_row())
        assert resume_wanted_starts(gen.sup, gen.store, stopped_stacks=set()) == []
        assert gen.sup.instances[API].state is State.READY        # not stopped again
        assert gen.store.wanted_starts() == []

    run_generation(tmp_path, UNPROBED, body)


def test_a_record_without_a_wait_is_taken_over_after_a_stop_as_before(tmp_path: Path):
    async def body(gen: Any, owner: FakeOwner) -> None:
        store = gen.store
        store.want_start(API, "act-old")                       # as an older release did
        # and one whose wait a release before start_waits left behind: its row was
        # written again since (another activation and time), so the wait is not its own
        store.want_start("o/db/0", "act-before", Wait(WaitKind.ORDER, 1e12).to_row())
        store.db.execute("UPDATE starts_after_stop SET activation = 'act-old', at = 1 "
                         "WHERE key = 'o/db/0'")
        assert store.start_waits() == {}
        assert resume_wanted_starts(gen.sup, store, stopped_stacks=set()) == [API, "o/db/0"]
        for key in (API, "o/db/0"):                # stopped again, to start once down
            assert gen.sup.instances[key].state is State.STOPPING
            assert gen.sup.pending_start(key) is not None

    run_generation(tmp_path, UNPROBED, body)


def test_a_backend_db_from_before_start_waits_opens_with_its_rows(tmp_path: Path):
    path = str(tmp_path / "backend.db")
    store = BackendStore(path)
    store.db.executescript("DROP TABLE start_waits; DELETE FROM meta WHERE key = "
                           "'part:start_waits'; INSERT INTO starts_after_stop VALUES "
                           "('o/api/0', 'act-old', 1.0)")
    store.close()
    store = BackendStore(path)                     # the part is added; old rows stay
    try:
        assert store.wanted_starts() == [API] and store.start_waits() == {}
        meta = dict(store.db.execute("SELECT key, value FROM meta"))
        assert meta["part:start_waits"] == "1"
    finally:
        store.close()


def test_a_wait_of_a_kind_this_build_does_not_know_is_none():
    assert Wait.from_row("k", ("order", 5.0)) == Wait(WaitKind.ORDER, 5.0)
    assert Wait.from_row("k", ("after-stop", 5.0)) == Wait(WaitKind.AFTER_STOP, 5.0)
    assert Wait.from_row("k", ("later", 5.0)) is None
    assert Wait.from_row("k", None) is None
