"""guardian.backendwatch: the outcome of each probe is kept on the generation, and only
a change is logged and written to the diagnostics (the first answer is not news).
Fake coordinator and probe, no sleep."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from guardian import backendwatch
from guardian.backendproc import BackendProcess


class Co:
    def __init__(self, bp: BackendProcess) -> None:
        self.current = bp
        self.command_lock = asyncio.Lock()
        self.paths = SimpleNamespace(api_sock="/h/backend/api.sock")
        self.written = 0

    def write_diagnostics(self) -> None:
        self.written += 1


def test_only_changes_are_logged_and_written(monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    outcomes = [None, "no answer", "no answer", None, None]
    seen: list[bool | None] = []

    async def fake_probe(sock: str, pid: int, timeout: float) -> str | None:
        return outcomes.pop(0)

    async def rounds(delay: float) -> None:
        seen.append(bp.answering)
        if not outcomes:
            raise asyncio.CancelledError

    bp = BackendProcess("act-1", 4242, None)
    monkeypatch.setattr(bp, "alive", lambda: True)
    monkeypatch.setattr(backendwatch, "probe", fake_probe)
    co = Co(bp)
    with caplog.at_level(logging.INFO, "tenure.guardian"), \
            pytest.raises(asyncio.CancelledError):
        asyncio.run(backendwatch.watch_backend(co, sleep=rounds))  # type: ignore[arg-type]
    assert seen == [None, True, False, False, True, True]
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "backend generation act-1 (pid 4242) is alive but does not answer: no answer",
        "backend generation act-1 (pid 4242) answers again"]
    assert co.written == 2 and bp.unanswered_since is None and bp.unanswered_why is None


def test_a_generation_that_stays_silent_keeps_when_it_began() -> None:
    bp = BackendProcess("act-1", 4242, None)
    assert backendwatch.note(bp, "no answer", 100.0) is None
    assert backendwatch.note(bp, "still none", 102.0) is False
    assert (bp.answering, bp.unanswered_since, bp.unanswered_why) == (False, 100.0,
                                                                      "still none")
    assert backendwatch.note(bp, None, 104.0) is False
    assert (bp.answering, bp.unanswered_since) == (True, None)
