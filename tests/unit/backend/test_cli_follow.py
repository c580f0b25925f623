"""Followers (`events -f`, `logs -f`) and redrawn views (`top`) while no backend answers
for a while: waited out from the first read on, a blocked recovery said at once, a
frame that could not be drawn shown and the next drawn (no processes, no sleeps)."""

from __future__ import annotations

import types
from typing import Any

import pytest

from backend.cli.events import follow_events
from backend.cli.logs import FOLLOW_POLL_S, follow_logs
from backend.cli.top import run as top
from protocol.errors import BackendUnavailable, TransportLost

BLOCKED = BackendUnavailable("no backend generation answers; recovery blocked", {
    "diagnostics": {"blocked": {"reason": "no valid recovery certificate"}},
    "stopped": None})
RESTARTING = BackendUnavailable("no backend generation answers",
                                {"diagnostics": {"blocked": None}, "stopped": None})
NOT_RUNNING = BackendUnavailable("no backend generation answers; tenure is not running",
                                 {"diagnostics": None, "stopped": {"owner": None}})
EMPTY_EVENTS = {"events": [], "last_id": 0, "next": 0, "more": False}
EMPTY_LOGS = {"records": [], "last_id": 0, "next": 0, "more": False}


class Ended(Exception):
    """Ends a follow in a test (Ctrl-C does for a user)."""


def args(**kw: Any) -> Any:
    base = {"targets": [], "kind": None, "stream": None, "since": None, "n": 0,
            "follow": True, "json": True, "grep": None}
    return types.SimpleNamespace(**{**base, **kw})


def scripted(script: list[Any]) -> Any:
    """A ``call`` that plays ``script``: exceptions are raised, answers returned."""
    asked: list[dict[str, Any]] = []

    def call(a: Any, method: str, params: dict[str, Any]) -> Any:
        asked.append(params)
        step = script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step
    call.asked = asked   # type: ignore[attr-defined]
    return call


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr("backend.cli.logs.time.sleep", slept.append)
    return slept


def test_events_f_started_while_no_backend_answers_waits_as_logs_f_does(sleeps, capsys):
    """Was: exit 3 at once (its first read was not waited out), while `logs -f` waited."""
    call = scripted([RESTARTING, TransportLost("lost"), EMPTY_EVENTS, Ended()])
    with pytest.raises(Ended):
        follow_events(args(), call)
    assert len(call.asked) == 4 and sleeps.count(FOLLOW_POLL_S) == 2
    assert capsys.readouterr().err == ""   # a restart: nothing to say
    with pytest.raises(BackendUnavailable):   # without -f: at once
        follow_events(args(follow=False), scripted([RESTARTING]))
    with pytest.raises(BackendUnavailable):   # tenure is not running: nothing to wait for
        follow_events(args(), scripted([NOT_RUNNING]))
    assert sleeps.count(FOLLOW_POLL_S) == 2


def test_a_follower_says_at_once_that_recovery_is_blocked(sleeps, capsys):
    """Was: silent for 120 s, then BACKEND_UNAVAILABLE, while the guardian's
    diagnostics said from the start that only the operator could end it."""
    call = scripted([BLOCKED, BLOCKED, BLOCKED, EMPTY_EVENTS, Ended()])
    with pytest.raises(Ended):
        follow_events(args(), call)
    err = capsys.readouterr().err
    assert err == ("tenure: events: no backend answers: recovery blocked: no valid "
                   "recovery certificate (`tenure backend recover`); waiting for one for "
                   "up to 120 s (Ctrl-C ends)\n"
                   "tenure: events: a backend answers again; following\n"), err
    with pytest.raises(Ended):
        follow_logs(args(n=0), scripted([BLOCKED, BLOCKED, EMPTY_LOGS, Ended()]))
    assert capsys.readouterr().err.startswith("tenure: logs: no backend answers: recovery "
                                              "blocked: no valid recovery certificate")


def test_a_recovery_blocked_after_the_silence_was_said_is_said_too(monkeypatch, capsys):
    """Regression: one flag stood for both lines, so a follower that had said "no
    backend has answered for 5 s" never said that recovery was blocked, though only the
    operator could end it; each is said once."""
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds
    monkeypatch.setattr("backend.cli.logs.time.sleep", sleep)
    monkeypatch.setattr("backend.cli.logs.time.monotonic", lambda: clock[0])
    quiet = int(6 / FOLLOW_POLL_S)            # past the 5 s after which a wait is said
    call = scripted([*[RESTARTING] * quiet, *[BLOCKED] * 3, EMPTY_EVENTS, Ended()])
    with pytest.raises(Ended):
        follow_events(args(), call)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and lines[0].startswith(
        "tenure: events: no backend has answered for 5 s (no backend generation "
        "answers); waiting for one"), lines
    assert lines[1:] == [
        "tenure: events: no backend answers: recovery blocked: no valid recovery "
        "certificate (`tenure backend recover`); waiting for one for up to 120 s "
        "(Ctrl-C ends)", "tenure: events: a backend answers again; following"], lines


STATUS = {"apps": [{"key": "s/a/0", "state": "ready", "pid": 10, "cpu_percent": 1.0,
                    "rss": 2048, "restarts": 0, "uptime": 5.0}],
          "owner_link": {"current": True}}


def test_top_redraws_through_a_moment_without_backend(monkeypatch, capsys):
    """Was: exit 3 at the first frame without an answer, while `status -w` redrew."""
    frames: list[float] = []

    def sleep(seconds: float) -> None:
        frames.append(seconds)
        if len(frames) > 4:
            raise KeyboardInterrupt
    monkeypatch.setattr("time.sleep", sleep)
    answers = scripted([STATUS, STATUS, RESTARTING, TransportLost("status: lost"), STATUS])
    a = types.SimpleNamespace(n=None, every=0.5, once=False, json=False, sort="cpu")
    printed: list[str] = []
    assert top(a, lambda: answers(a, "status", {}),
               lambda snap, text: printed.append(text)) == 0
    shown = capsys.readouterr().out
    assert "backend: not available" in shown and "tenure: TRANSPORT_LOST" in shown, shown
    assert len(printed) == 2   # the frames that had an answer

    def gone() -> dict[str, Any]:
        raise RESTARTING
    once = types.SimpleNamespace(n=None, every=0.5, once=True, json=False, sort="cpu")
    with pytest.raises(BackendUnavailable):   # one snapshot: the error is the answer
        top(once, gone, lambda snap, text: None)
