"""How the CLI waits for an operation (backend.cli.opwait.wait_op): it asks op.show to
wait for the end; a backend that answers at once (one older than ``wait``) is asked
again every 20 ms, never in a busy loop; the overall timeout bounds every wait. A backend
away (a handoff) is waited out within that timeout, and the wait ends at once when none
is coming."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from backend.cli import opwait
from protocol.errors import BackendUnavailable, ShuttingDown, TransportLost


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


class FakeBackend:
    """op.show answers (an exception is raised), each taking ``takes`` seconds of the
    clock."""

    def __init__(self, answers: list[Any], clock: Clock, takes: float = 0.0
                 ) -> None:
        self.answers, self.clock, self.takes = answers, clock, takes
        self.params: list[dict[str, Any]] = []

    def __call__(self, args: Any, method: str, params: dict[str, Any],
                 timeout: float = 300.0) -> dict[str, Any]:
        assert method == "op.show"
        assert timeout == params["wait"] + opwait.ANSWER_S   # bounded by the wait
        self.params.append(params)
        self.clock.now += self.takes
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(opwait.time, "monotonic", lambda: c.now)
    monkeypatch.setattr(opwait.time, "sleep", c.sleep)
    return c


def test_a_backend_that_waits_is_asked_once(clock) -> None:
    fake = FakeBackend([{"outcome": "success"}], clock, takes=3.0)
    assert opwait.wait_op(SimpleNamespace(), fake, "op-1", 3600, "apply")["outcome"] == \
        "success"
    assert fake.params == [{"id": "op-1", "wait": opwait.OP_WAIT}]
    assert clock.sleeps == []                               # no sleep of its own


def test_an_older_backend_answering_at_once_is_polled_every_20_ms(clock) -> None:
    fake = FakeBackend([{"outcome": None}] * 3 + [{"outcome": "failed"}], clock)
    assert opwait.wait_op(SimpleNamespace(), fake, "op-1", 3600, "apply")["outcome"] == \
        "failed"
    assert clock.sleeps == [0.02, 0.02, 0.02]


def test_the_timeout_bounds_the_wait_asked_for(clock) -> None:
    fake = FakeBackend([{"outcome": None}, {"outcome": None}], clock, takes=4.0)
    assert opwait.wait_op(SimpleNamespace(), fake, "op-1", 5.0, "apply")["outcome"] is None
    assert [p["wait"] for p in fake.params] == [5.0, 1.0]


DRAINING = "server is draining; retry against the next one"


def away(stopped: Any = None) -> BackendUnavailable:
    return BackendUnavailable("no backend generation answers",
                              {"diagnostics": None, "stopped": stopped})


@pytest.fixture
def guardian_runs() -> None:
    """The guardian runs: a backend away is one between generations, coming back (the
    errors of these tests say nothing else: nobackend.none_coming)."""


def test_a_handoff_during_the_wait_is_waited_out_and_ends_with_the_outcome(
        clock, guardian_runs, capsys) -> None:
    """Was: `apply --wait` and `op show --wait` ended with SHUTTING_DOWN (exit 1, read as
    a failed operation) while the next generation ran it to success."""
    fake = FakeBackend([{"outcome": None}, ShuttingDown(DRAINING), away(),
                        TransportLost("op.show: connection lost"), {"outcome": "success"}],
                       clock, takes=0.5)
    op = opwait.wait_op(SimpleNamespace(home="/nonexistent"), fake, "op-1", 3600, "apply")
    assert op["outcome"] == "success"
    assert [p["id"] for p in fake.params] == ["op-1"] * 5    # the same operation
    assert capsys.readouterr().err == ""                     # a routine handoff: no word


def test_no_backend_coming_ends_the_wait_at_once(clock, guardian_runs) -> None:
    stopped = away(stopped={"owner": None})                  # tenure is not running
    fake = FakeBackend([ShuttingDown(DRAINING), stopped], clock)
    with pytest.raises(BackendUnavailable) as raised:
        opwait.wait_op(SimpleNamespace(home="/nonexistent"), fake, "op-1", 3600, "op show")
    assert raised.value is stopped and len(fake.params) == 2


def test_a_backend_away_past_the_timeout_ends_it_unreachable_and_says_so(
        clock, guardian_runs, capsys) -> None:
    fake = FakeBackend([ShuttingDown(DRAINING)] * 1000, clock, takes=1.0)
    began = clock.now
    with pytest.raises(BackendUnavailable) as raised:
        opwait.wait_op(SimpleNamespace(home="/nonexistent"), fake, "op-1", 30, "op show")
    assert raised.value.data == {"operation": "op-1", "last_error": "SHUTTING_DOWN"}
    assert "`tenure op show op-1 --wait`" in raised.value.msg
    assert 30 <= clock.now - began <= 32                     # within its --timeout
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith(   # it answers: a drain, not silence
        "tenure: op show: the backend has been draining for a handoff for 6 s (server is "
        "draining"), said


def test_a_long_silence_is_said_and_so_is_the_answer_after_it(
        clock, guardian_runs, capsys) -> None:
    fake = FakeBackend([away()] * 6 + [{"outcome": "failed"}], clock, takes=1.0)
    op = opwait.wait_op(SimpleNamespace(home="/nonexistent"), fake, "op-1", 3600, "up")
    assert op["outcome"] == "failed"
    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith("tenure: up: no backend has answered for 6 s"), said
    assert said[1:] == ["tenure: up: a backend answers again; waiting for operation op-1"]


def test_a_backend_that_does_not_answer_is_waited_out_within_the_timeout(
        clock, capsys) -> None:
    """A backend stopped (SIGSTOP) mid-wait: each op.show now gives up after its wait
    and ANSWER_S (it took the client's 300 s), and the silence is said and bounded by
    --timeout, as for a backend between generations."""
    from protocol.errors import RequestTimedOut
    silent = RequestTimedOut("request timed out")
    fake = FakeBackend([silent] * 5, clock, takes=6.0)
    with pytest.raises(BackendUnavailable) as err:
        opwait.wait_op(SimpleNamespace(), fake, "op-1", 20.0, "op show")
    assert "op-1" in err.value.msg and clock.now < 100.0 + 20.0 + 6.0 + 1.0
    assert "op show: no backend has answered for 6 s" in capsys.readouterr().err
