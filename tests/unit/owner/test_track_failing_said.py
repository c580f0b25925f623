"""Recording descendants on a full disk: said when it begins, every 30 s while it lasts
and when it works again; it was one error line a second."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from owner.supervise import Launcher
from protocol.seldom import Seldom


class _Procs:
    cgroups = None

    def __init__(self) -> None:
        self.full = True

    def track(self) -> None:
        if self.full:
            raise OSError(28, "No space left on device")


def test_a_full_disk_is_said_once_per_streak(monkeypatch: Any,
                                             caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        launcher = Launcher.__new__(Launcher)
        procs = _Procs()
        launcher.procs = procs  # type: ignore[misc]
        launcher.record_descendants = lambda: None  # type: ignore[method-assign]
        clock = [1000.0]
        launcher._track_trouble = Seldom(30.0, clock=lambda: clock[0])
        launcher.uncertain = {}
        with caplog.at_level(logging.WARNING, logger="tenure.owner"):
            for _ in range(20):          # 20 s of it
                launcher._track()
                launcher._tracker.cancel()
                clock[0] += 1.0
            assert caplog.text.count("recording descendants failed") == 1
            clock[0] += 15.0
            launcher._track()
            launcher._tracker.cancel()
            assert caplog.text.count("recording descendants failed") == 2
            procs.full = False
            launcher._track()
            launcher._tracker.cancel()
        assert "recording descendants works again" in caplog.text
    asyncio.run(main())


def test_the_exit_of_an_uncertain_launch_is_written_once_the_disk_takes_it() -> None:
    """Was: only at the owner's shutdown, so status listed it as uncertain (and owner.db
    said `running`) long after there was room again."""
    class _Store:
        def __init__(self) -> None:
            self.full, self.written = True, []

        def mark_exited(self, key: str, ended: Any, started: Any = None) -> None:
            if self.full:
                raise OSError(28, "No space left on device")
            self.written.append(key)

    class _Row:
        exit = {"exit_code": 1, "signal": None}

    async def main() -> None:
        launcher = Launcher.__new__(Launcher)
        procs, store = _Procs(), _Store()
        procs.full = False
        launcher.procs, launcher.store = procs, store  # type: ignore[misc,assignment]
        launcher.record_descendants = lambda: None  # type: ignore[method-assign]
        launcher._track_trouble = Seldom(30.0)
        launcher.live = {}
        launcher.uncertain = {"s/a/0/1": _Row()}  # type: ignore[dict-item]
        launcher._track()
        launcher._tracker.cancel()
        assert launcher.uncertain and store.written == []
        store.full = False
        launcher._track()
        launcher._tracker.cancel()
        assert launcher.uncertain == {} and store.written == ["s/a/0/1"]
    asyncio.run(main())
