"""How the CLI waits for an operation (backend.cli.commands._wait_op): it asks op.show to
wait for the end; a backend that answers at once (one older than ``wait``) is asked
again every 20 ms, never in a busy loop; the overall timeout bounds every wait."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from backend.cli import commands


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


class FakeBackend:
    """op.show answers, each taking ``takes`` seconds of the clock."""

    def __init__(self, answers: list[dict[str, Any]], clock: Clock, takes: float = 0.0
                 ) -> None:
        self.answers, self.clock, self.takes = answers, clock, takes
        self.params: list[dict[str, Any]] = []

    def __call__(self, args: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert method == "op.show"
        self.params.append(params)
        self.clock.now += self.takes
        return self.answers.pop(0)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(commands.time, "monotonic", lambda: c.now)
    monkeypatch.setattr(commands.time, "sleep", c.sleep)
    return c


def test_a_backend_that_waits_is_asked_once(monkeypatch, clock) -> None:
    fake = FakeBackend([{"outcome": "success"}], clock, takes=3.0)
    monkeypatch.setattr(commands, "_call", fake)
    assert commands._wait_op(SimpleNamespace(), "op-1", 3600)["outcome"] == "success"
    assert fake.params == [{"id": "op-1", "wait": commands.OP_WAIT}]
    assert clock.sleeps == []                               # no sleep of its own


def test_an_older_backend_answering_at_once_is_polled_every_20_ms(monkeypatch,
                                                                   clock) -> None:
    fake = FakeBackend([{"outcome": None}] * 3 + [{"outcome": "failed"}], clock)
    monkeypatch.setattr(commands, "_call", fake)
    assert commands._wait_op(SimpleNamespace(), "op-1", 3600)["outcome"] == "failed"
    assert clock.sleeps == [0.02, 0.02, 0.02]


def test_the_timeout_bounds_the_wait_asked_for(monkeypatch, clock) -> None:
    fake = FakeBackend([{"outcome": None}, {"outcome": None}], clock, takes=4.0)
    monkeypatch.setattr(commands, "_call", fake)
    assert commands._wait_op(SimpleNamespace(), "op-1", 5.0)["outcome"] is None
    assert [p["wait"] for p in fake.params] == [5.0, 1.0]
