"""events.read writes the pending events before it reads, so an answer holds what
happened before its request; a write that fails leaves them buffered and the answer
holds what is written (no error for the reader)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from backend.events import EventLog
from backend.events_api import events_methods
from backend.testing import FakeOwner, api_call, fake_generation


def _read(gen: object) -> list[dict[str, object]]:
    handler = events_methods(gen)["events.read"].handler  # type: ignore[arg-type]

    async def read() -> list[dict[str, object]]:
        return list((await handler(api_call("events.read", limit=100)))["events"])
    return asyncio.run(read())


def test_a_read_lists_what_was_recorded_before_it(tmp_path: Path) -> None:
    async def make() -> object:
        return fake_generation(tmp_path, FakeOwner())
    gen = asyncio.run(make())
    gen.events = EventLog(gen.store, "a1")  # type: ignore[attr-defined]
    gen.events.record("exit", "s/a/0", pid=7)  # type: ignore[attr-defined]
    assert [e["data"] for e in _read(gen)] == [{"pid": 7}]


def test_a_failed_write_keeps_the_events_buffered_and_answers_what_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def make() -> object:
        return fake_generation(tmp_path, FakeOwner())
    gen = asyncio.run(make())
    log = gen.events = EventLog(gen.store, "a1")  # type: ignore[attr-defined]
    log.record("exit", "s/a/0", pid=7)
    log.flush()
    log.record("exit", "s/a/0", pid=8)

    def full() -> int:
        raise sqlite3.OperationalError("database or disk is full")
    monkeypatch.setattr(log, "write", full)   # what persist writes them with
    assert [e["data"] for e in _read(gen)] == [{"pid": 7}]
    monkeypatch.undo()
    assert log.flush() == 1                      # still buffered, written later
    assert [e["data"] for e in _read(gen)] == [{"pid": 7}, {"pid": 8}]
