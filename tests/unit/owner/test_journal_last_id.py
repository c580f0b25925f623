"""The journal's last id is known without reading the database: the owner's ``status``
(the backend's heartbeat, the guardian's look) asks for it, and it waited behind every
``logs.read`` in progress (one reader connection, one lock): 150 pipelined reads of one
client made it take 5.8 s, and the guardian called the owner unreachable."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from owner import journal as journal_mod
from owner.journal import Journal, LogSource
from protocol.errors import ShuttingDown

SRC = LogSource("s", "a", 1, 1)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    j = Journal(tmp_path / "journal.db")
    try:
        yield j
    finally:
        j.close()


def test_last_id_does_not_wait_behind_a_read_in_progress(
        journal: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
    journal.append(SRC, "stdout", [(b"one", 0), (b"two", 0)])
    assert journal.flush(10)
    reading, release = _held_reads(monkeypatch)
    reader = threading.Thread(target=journal.read_page, args=(0, 10))
    reader.start()
    try:
        assert reading.wait(10)
        got: list[int] = []
        asker = threading.Thread(target=lambda: got.append(journal.last_id()), daemon=True)
        t0 = time.monotonic()
        asker.start()
        asker.join(2.0)
        assert got == [2], f"last_id waited {time.monotonic() - t0:.1f} s behind a read"
    finally:
        release.set()
        reader.join(10)


def test_last_id_follows_commits_and_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with Journal(path) as j:
        assert j.last_id() == 0
        j.append(SRC, "stdout", [(b"x", 0)] * 5)
        assert j.flush(10)
        assert j.last_id() == 5
        assert j.forget([("s", "a", 1)]) == 5
        assert j.last_id() == 5   # forgetting never lowers it
    with Journal(path) as j:
        assert j.last_id() == 5
        j.append(SRC, "stdout", [(b"y", 0)])
        assert j.flush(10)
        assert j.last_id() == 6
    with pytest.raises(ShuttingDown):
        j.last_id()


def test_log_reads_leave_the_default_thread_pool_to_the_rest(
        journal: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: every logs.read ran in asyncio's shared default pool (6 threads here), where
    they waited for the journal's one reader one after another: 150 of them made the
    owner's other work off the loop (a launch's inodes, metrics) wait seconds."""
    from owner.service import OwnerService
    from protocol.server import Call

    journal.append(SRC, "stdout", [(b"x", 0)])
    assert journal.flush(10)
    reading, release = _held_reads(monkeypatch)
    service = OwnerService.__new__(OwnerService)   # logs.read needs its journal only
    service.journal = journal
    params = {"after": 0, "limit": 10, "max_bytes": 1 << 20, "tail": None, "stack": None,
              "app": None, "instance": None, "stream": None}

    async def main() -> float:
        reads = [asyncio.ensure_future(service.logs_read(
            Call("logs.read", params, None, i, None)))   # type: ignore[arg-type]
            for i in range(40)]
        try:
            await asyncio.to_thread(reading.wait, 10)
            t0 = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.to_thread(int), 2.0)
            return time.monotonic() - t0
        finally:
            release.set()
            pages = await asyncio.gather(*reads)
            assert all(p["last_id"] == 1 for p in pages)

    waited = asyncio.run(main())
    assert waited < 1.0, f"work in the default pool waited {waited:.1f} s behind log reads"


def _held_reads(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Journal reads from now on wait, once begun (``reading`` set), until ``release``
    is set (10 s at most)."""
    reading, release = threading.Event(), threading.Event()
    real = journal_mod.read_at

    def slow_read(*args: Any, **kwargs: Any) -> Any:
        reading.set()
        release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(journal_mod, "read_at", slow_read)
    return reading, release


def test_log_reads_do_not_wait_behind_journal_maintenance(
        journal: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: logs.retention, logs.forget and logs.forget_apps ran in the journal's two
    request threads: a budget lowered (the backend's loop) beside a job's output
    forgotten (its pruner) held both, and every `tenure logs`, `logs -f` and backend
    read waited until the deletes ended (seconds per 100 MiB)."""
    from owner.service import OwnerService
    from protocol.server import Call

    journal.append(SRC, "stdout", [(b"x", 0)])
    assert journal.flush(10)
    busy, release = threading.Event(), threading.Event()

    def slow(*args: Any, **kwargs: Any) -> int:
        busy.set()
        release.wait(10)
        return 0
    monkeypatch.setattr(journal, "forget", slow)
    monkeypatch.setattr(journal, "forget_apps", slow)
    monkeypatch.setattr(journal, "set_retention", slow)
    service = OwnerService.__new__(OwnerService)   # these need its journal only
    service.journal = journal
    service._require_epoch = lambda call: None     # type: ignore[method-assign]
    service._refuse_busy = lambda what, matches: None   # type: ignore[method-assign]
    read = {"after": 0, "limit": 10, "max_bytes": 1 << 20, "tail": None, "stack": None,
            "app": None, "instance": None, "stream": None}

    async def main() -> float:
        held = [
            asyncio.ensure_future(service.logs_forget(Call("logs.forget", {"sources": [
                {"stack": "s", "app": "job:x", "instance": 1}]}, None, 1, None))),  # type: ignore[arg-type]
            asyncio.ensure_future(service.logs_forget_apps(Call("logs.forget_apps", {
                "apps": [{"stack": "s", "app": "gone"}]}, None, 2, None))),  # type: ignore[arg-type]
            asyncio.ensure_future(service.logs_retention(Call("logs.retention", {
                "budgets": [], "keep": True}, None, 3, None)))]  # type: ignore[arg-type]
        try:
            await asyncio.to_thread(busy.wait, 10)
            t0 = time.monotonic()
            page = await asyncio.wait_for(service.logs_read(
                Call("logs.read", read, None, 4, None)), 5.0)   # type: ignore[arg-type]
            assert page["last_id"] == 1
            return time.monotonic() - t0
        finally:
            release.set()
            await asyncio.gather(*held)

    waited = asyncio.run(main())
    assert waited < 1.0, f"a log read waited {waited:.1f} s behind journal maintenance"
