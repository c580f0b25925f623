"""A start wanted once an instance is down is recorded in backend.db before the stop it
follows is sent, forgotten when taken or withdrawn, kept when this generation closes,
forgotten (its own records only) when it is fenced off, and taken over by the next
generation (backend.adopt.resume_wanted_starts). Fake owner; real SQLite."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from backend.adopt import resume_wanted_starts
from backend.generation import Generation
from backend.instance import State, StopRequested
from backend.testing import FakeOwner, run_generation, until
from protocol.errors import ShuttingDown

TWO = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n\n'
       '[stacks.t.apps.b]\ncommand = ["sleep", "1000"]\n')

Body = Callable[[Generation, FakeOwner], Awaitable[None]]


def _run(tmp_path: Path, body: Body, *, restarting: bool = False) -> None:
    """``body`` on a ready generation of TWO; ``restarting``: both instances restarted,
    their stops held by the owner (released at the end)."""
    async def scenario(gen: Generation, owner: FakeOwner) -> None:
        if restarting:
            owner.hold("stop")
            for key in ("s/a/0", "t/b/0"):
                gen.sup.start_when_down(key, 60.0, stop=True)
        await body(gen, owner)
        if restarting:
            owner.release("stop")
    run_generation(tmp_path, TWO, scenario)


def test_recorded_before_the_stop_is_sent_and_forgotten_once_started(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        seen: list[list[str]] = []
        owner.before = lambda method, p: seen.append(gen.store.wanted_starts()) \
            if method == "stop" else None
        started = gen.sup.start_when_down("s/a/0", 60.0, stop=True)
        assert await asyncio.wait_for(started, 5) is True
        assert seen == [["s/a/0"]]            # on disk when the owner heard the stop
        assert gen.store.wanted_starts() == []
    _run(tmp_path, body)


def test_a_later_stop_forgets_it_and_closing_keeps_it(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        gen.sup.feed("s/a/0", StopRequested())      # the latest intent wins
        assert gen.store.wanted_starts() == ["t/b/0"]
        await gen.sup.aclose()                       # this generation only
        assert gen.store.wanted_starts() == ["t/b/0"]
    _run(tmp_path, body, restarting=True)


def test_a_record_that_cannot_be_written_stops_nothing(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        def full(key: str, activation: str, wait: object = None) -> None:
            raise sqlite3.OperationalError("database or disk is full")
        gen.store.want_start = full  # type: ignore[method-assign]
        with pytest.raises(sqlite3.OperationalError):
            gen.sup.start_when_down("s/a/0", 60.0, stop=True)
        assert gen.sup.instances["s/a/0"].state is State.READY
        assert gen.sup.pending_start("s/a/0") is None and not owner.sent("stop")
    _run(tmp_path, body)


def test_the_next_generation_takes_over_what_is_still_wanted(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        for key in ("s/a/0", "t/b/0", "s/gone/0"):
            gen.store.want_start(key, "act-before")
        taken = resume_wanted_starts(gen.sup, gen.store, stopped_stacks={"t"})
        assert taken == ["s/a/0"]                 # t is stopped, s/gone has no app
        inst = gen.sup.instances["s/a/0"]
        assert inst.state is State.STOPPING       # stopped again: joins any stop
        await until(lambda: inst.state is State.READY and inst.generation == 2,
                    "started again")
        assert gen.store.wanted_starts() == []
        assert gen.sup.instances["t/b/0"].generation == 1
    _run(tmp_path, body)


def test_fenced_off_it_forgets_its_own_records_only(tmp_path: Path):
    async def body(gen: Generation, owner: FakeOwner) -> None:
        gen.store.want_start("t/b/0", "act-newer")   # a newer generation took it over
        gen.sup.fence("a newer generation holds the owner")
        assert gen.store.wanted_starts() == ["t/b/0"]
        with pytest.raises(ShuttingDown):
            gen.sup.start_when_down("s/a/0", 60.0, stop=True)
        assert gen.store.wanted_starts() == ["t/b/0"]
    _run(tmp_path, body, restarting=True)
