"""A round of persist writes the events it tells (a state, an exit) and the
instances' states in one commit. Was: the events were committed, then the states: a
backend killed between the two (SIGKILL right after a `tenure stop` it answered) left an
exit told and its instance still `stopping` in backend.db, and the generation that
recovered replayed that exit and told it again. Fake owner; real SQLite."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from backend.certify import persist
from backend.events import EventLog
from backend.generation import Generation
from backend.instance import StopRequested
from backend.testing import FakeOwner, run_generation, until

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def _with_events(gen: Generation) -> None:
    """The event log a started generation has (fake_generation opens none)."""
    gen.events = gen.sup.events = EventLog(gen.store, gen.activation)


async def _stopped_unsaved(gen: Generation) -> None:
    """s/a/0 saved as it was, then stopped: its events and state wait to be written."""
    _with_events(gen)
    persist(gen)
    gen.sup.feed("s/a/0", StopRequested())
    await until(lambda: gen.sup.instances["s/a/0"].state.value == "stopped", "the stop")


def _stopped_told(gen: Generation) -> int:
    """How many events in backend.db tell that s/a/0 became stopped."""
    return sum('"to": "stopped"' in data for (data,) in gen.store.db.execute(
        "SELECT data FROM events WHERE kind = 'state' AND target = 's/a/0'"))


def test_an_event_and_the_state_it_tells_of_are_one_commit(tmp_path: Path) -> None:
    async def body(gen: Generation, owner: FakeOwner) -> None:
        await _stopped_unsaved(gen)
        commits: list[str] = []
        gen.store.db.set_trace_callback(
            lambda sql: commits.append(sql) if sql.strip().upper() == "COMMIT" else None)
        assert _stopped_told(gen) == 0 and "s/a/0" in gen.sup.dirty
        persist(gen)
        gen.store.db.set_trace_callback(None)
        assert commits == ["COMMIT"]
        assert gen.store.instances()["s/a/0"]["state"] == "stopped"
        assert _stopped_told(gen) == 1
    run_generation(tmp_path, ONE, body)


def test_states_that_cannot_be_saved_keep_their_events_buffered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither part is durable without the other: the next round writes both."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        await _stopped_unsaved(gen)
        real = gen.store.save_instances

        def full(*args: object) -> None:
            raise sqlite3.OperationalError("database or disk is full")
        monkeypatch.setattr(gen.store, "save_instances", full)
        with pytest.raises(sqlite3.OperationalError):
            persist(gen)
        assert _stopped_told(gen) == 0
        assert gen.store.instances()["s/a/0"]["state"] != "stopped"
        monkeypatch.setattr(gen.store, "save_instances", real)
        persist(gen)
        assert _stopped_told(gen) == 1        # once: not written twice either
        assert gen.store.instances()["s/a/0"]["state"] == "stopped"
    run_generation(tmp_path, ONE, body)


def test_a_transaction_sqlite_ended_while_the_events_were_written_saves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    """A full disk can make SQLite roll the whole transaction back itself. Was: the
    states were then saved outside it, without their events, and the COMMIT failed
    ('no transaction is active'): the round said the states were not saved though they
    were, and the event log's failure was logged again every round."""
    async def body(gen: Generation, owner: FakeOwner) -> None:
        await _stopped_unsaved(gen)

        def full() -> int:
            gen.store.db.execute("ROLLBACK")
            raise sqlite3.OperationalError("database or disk is full")
        monkeypatch.setattr(gen.events, "write", full)
        with caplog.at_level("ERROR", logger="tenure.backend"):
            for _ in range(2):
                with pytest.raises(sqlite3.OperationalError, match="rolled back"):
                    persist(gen)
        assert sum("could not write the event log" in r.getMessage()
                   for r in caplog.records) == 1
        assert gen.store.instances()["s/a/0"]["state"] != "stopped"
        assert not gen.store.db.in_transaction
        monkeypatch.undo()              # the disk has room again: both are written
        persist(gen)
        assert gen.store.instances()["s/a/0"]["state"] == "stopped"
    run_generation(tmp_path, ONE, body)
