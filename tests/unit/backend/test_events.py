"""The event log in a real backend.db: ids only grow (also after pruning), a reader
resumes after its last id, filters by instance and kind, reads the last N, learns when
it asked for pruned events; and what one machine event records."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from backend import events as ev
from backend.cli.cmdline import EVENT_KINDS
from backend.cli.events import _line, describe
from backend.explain import Check, LastProbe
from backend.instance import (
    BackoffElapsed,
    Exited,
    Instance,
    Launched,
    Probed,
    Ready,
    Start,
    Stopped,
    StopRequested,
)
from backend.model import App, Backoff, Readiness, ReadyKind, RestartMode, StartLimit
from backend.store import BackendStore


@pytest.fixture
def store(tmp_path: Path):
    s = BackendStore(str(tmp_path / "backend.db"))
    try:
        yield s
    finally:
        s.close()


def _log(store: BackendStore, activation: str = "a1") -> ev.EventLog:
    clock = iter(range(1_000, 10**6))
    return ev.EventLog(store, activation, clock=lambda: float(next(clock)))


def test_the_cli_offers_exactly_the_kinds_the_log_records() -> None:
    assert EVENT_KINDS == ev.KINDS


def test_events_are_written_by_flush_and_read_after_an_id(store) -> None:
    log = _log(store)
    log.record("state", "s/a/0", **{"from": "stopped", "to": "starting", "reason": None})
    assert log.read(after=0)["events"] == []          # buffered, not yet durable
    assert log.flush() == 1 and log.flush() == 0
    for i in range(4):
        log.record("exit", f"s/a/{i % 2}", pid=i)
    log.flush()
    page = log.read(after=0, limit=3)
    assert [e["id"] for e in page["events"]] == [1, 2, 3] and page["more"]
    rest = log.read(after=page["next"])
    assert [e["id"] for e in rest["events"]] == [4, 5] and not rest["more"]
    assert rest["events"][0] == {"id": 4, "at": 1003.0, "kind": "exit", "target": "s/a/0",
                                 "activation": "a1", "data": {"pid": 2}}


def test_filters_by_target_and_kind_and_the_last_n(store) -> None:
    log = _log(store)
    for i in range(10):
        log.record("exit" if i % 2 else "restart", f"s/a/{i % 3}", n=i)
    log.flush()
    only = log.read(after=0, targets={"s/a/0"}, kinds={"exit"})["events"]
    assert [e["data"]["n"] for e in only] == [3, 9]
    assert [e["data"]["n"] for e in log.read(tail=3)["events"]] == [7, 8, 9]
    assert [e["data"]["n"] for e in log.read(tail=2, kinds={"restart"})["events"]] == [6, 8]
    assert log.read(since_time=1_007.0)["events"][0]["data"]["n"] == 7


def test_a_long_tail_comes_a_page_at_a_time(store) -> None:
    """`tenure events -n 50000` of a crash loop's events was one answer of 5 MB: past
    the frame limit, the backend answered INTERNAL."""
    log = _log(store)
    for i in range(10):
        log.record("exit" if i % 2 else "restart", "s/a/0", n=i)
    log.flush()
    page = log.read(tail=7, kinds={"exit", "restart"}, limit=3)
    assert [e["data"]["n"] for e in page["events"]] == [3, 4, 5] and page["more"]
    rest = log.read(after=page["next"], kinds={"exit", "restart"}, limit=3)
    assert [e["data"]["n"] for e in rest["events"]] == [6, 7, 8] and rest["more"]
    whole = log.read(tail=7, limit=7)
    assert len(whole["events"]) == 7 and whole["next"] == whole["last_id"]
    assert not whole["more"]


def test_ids_only_grow_across_pruning_and_generations_and_a_gap_is_said(
        store, monkeypatch) -> None:
    monkeypatch.setattr(ev, "KEEP", 5)
    monkeypatch.setattr(ev, "PRUNE_EVERY", 1)
    first = _log(store, "a1")
    for i in range(8):
        first.record("exit", "s/a/0", n=i)
        first.flush()
    assert first.bounds() == (4, 8)
    old = first.read(after=1)
    assert old["gap"] and [e["id"] for e in old["events"]] == [4, 5, 6, 7, 8]
    second = _log(store, "a2")          # the next generation, same table
    second.record("handoff", phase="adopted")
    second.flush()
    new = second.read(after=8)["events"]
    assert [(e["id"], e["activation"], e["target"]) for e in new] == [(9, "a2", None)]


def test_an_overfull_buffer_keeps_the_newest_and_counts_the_rest(store, monkeypatch) -> None:
    monkeypatch.setattr(ev, "MAX_BUFFER", 3)
    log = _log(store)
    for i in range(5):
        log.record("exit", "s/a/0", n=i)
    log.flush()
    assert [e["data"].get("n") for e in log.read(after=0)["events"]] == [None, 2, 3, 4]
    assert log.lost == 2


def test_events_dropped_while_the_log_cannot_be_written_are_told_where_they_were(
        store, monkeypatch, caplog) -> None:
    """Was: counted in EventLog.lost and said nowhere; the events that survived got
    consecutive ids, so no reader could tell."""
    import sqlite3
    monkeypatch.setattr(ev, "MAX_BUFFER", 3)
    log = _log(store)
    log.record("exit", "s/a/0", n=0)
    log.flush()
    real = log._tx

    def failing() -> Any:
        raise sqlite3.OperationalError("disk I/O error")
    monkeypatch.setattr(log, "_tx", failing)
    for i in range(1, 6):                          # writes fail meanwhile: 2 dropped
        log.record("exit", "s/a/0", n=i)
        with pytest.raises(sqlite3.Error):
            log.flush()
    monkeypatch.setattr(log, "_tx", real)
    with caplog.at_level("WARNING", logger="tenure.backend"):
        assert log.flush() == 4 and log.pending() == 0
    assert "the event log lost 2 events" in caplog.text
    events = log.read(after=0)["events"]
    assert [(e["kind"], e["data"].get("n")) for e in events] == [
        ("exit", 0), ("lost", None), ("exit", 3), ("exit", 4), ("exit", 5)]
    assert events[1]["data"] == {"count": 2, "first_at": 1001.0, "last_at": 1002.0}
    assert events[1]["id"] == 2 and events[1]["target"] is None
    # every reader whose range holds them is told, whatever its filters
    assert log.read(after=0, kinds={"exit"})["lost"] == 2
    assert log.read(after=0, targets={"s/a/0"}, limit=1)["lost"] == 0   # ends at #1
    assert log.read(after=2)["lost"] == 0 and log.read(tail=3, kinds={"exit"})["lost"] == 0
    assert log.read(tail=4, kinds={"exit"})["lost"] == 2
    assert describe(events[1]).startswith("2 event(s) lost")
    log.record("exit", "s/a/0", n=6)
    assert log.flush() == 1 and log.lost == 2      # told once
    assert [e["kind"] for e in log.read(after=0)["events"]].count("lost") == 1


def test_a_reader_is_told_of_lost_events_on_stderr(store, monkeypatch, capsys) -> None:
    from types import SimpleNamespace

    from backend.cli import events as cli
    monkeypatch.setattr(ev, "MAX_BUFFER", 2)
    log = _log(store)
    for i in range(5):
        log.record("exit", "s/a/0", n=i)
    log.flush()

    def call(args: Any, method: str, params: dict[str, Any]) -> Any:
        return log.read(**{k: (set(v) if k == "kinds" else v) for k, v in params.items()})
    a = SimpleNamespace(targets=[], kind=["exit"], since="0", n=0, follow=False, json=True)
    assert cli.follow_events(a, call) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["data"]["n"] for line in out.splitlines()] == [3, 4]
    assert err.startswith("tenure: 3 event(s) here were lost: "), err


APP = App(name="a", stack="s", command=("srv",), restart=RestartMode.ALWAYS,
          ready=Readiness(kind=ReadyKind.NOTIFY), backoff=Backoff(),
          start_limit=StartLimit())


def _feed(log: ev.EventLog, inst: Instance, event: object, t: float) -> None:
    was = ev.Before(inst)
    inst.handle(event, t)  # type: ignore[arg-type]
    ev.transition_events(log, "s/a/0", inst, event, was)


def test_a_crash_records_its_exit_the_restart_and_each_state(store) -> None:
    log, inst = _log(store), Instance(APP, 0)
    _feed(log, inst, Start(), 0.0)
    _feed(log, inst, Launched(10, 1), 0.1)
    _feed(log, inst, Ready(), 0.2)
    _feed(log, inst, Exited(None, 9), 100.0)       # a crash after a stable run
    _feed(log, inst, BackoffElapsed(), 100.0)      # no delay after a stable run
    log.flush()
    got = [(e["kind"], describe(e)) for e in log.read(after=0)["events"]]
    assert got == [
        ("state", "stopped → starting"),
        ("state", "starting → running"),
        ("state", "running → ready"),
        ("exit", "pid 10 killed by SIGKILL"),
        ("state", "ready → backoff (killed by SIGKILL)"),
        ("restart", "restart 1 (launch generation 2)"),
        ("state", "backoff → starting"),
    ]


def test_an_exit_that_overtakes_its_launchs_answer_is_recorded(store) -> None:
    """The exit and the launch's answer come on two connections: a process that ended
    at once could be taken up before its pid was known, and its exit was not recorded
    (8 of 30 runs of `sh -c 'exit 7'`), though `inspect` had it."""
    log, inst = _log(store), Instance(APP, 0)
    _feed(log, inst, Start(), 0.0)
    _feed(log, inst, Exited(7, None, pid=4242), 0.05)   # before Launched
    _feed(log, inst, Launched(4242, 1), 0.06)             # late: ignored
    log.flush()
    got = [(e["kind"], describe(e)) for e in log.read(after=0)["events"]]
    assert ("exit", "pid 4242 exited 7") in got, got
    states = [i for i, (k, _) in enumerate(got) if k == "state"]
    assert got.index(("exit", "pid 4242 exited 7")) < states[1], got   # before → backoff


def test_an_exit_says_how_many_processes_the_run_left_running(store) -> None:
    """It said only `exited 0`; what tenure then stopped was in the backend's log."""
    log, inst = _log(store), Instance(APP, 0)
    _feed(log, inst, Start(), 0.0)
    _feed(log, inst, Launched(10, 1), 0.1)
    _feed(log, inst, Exited(0, None, pid=10, left_running=2), 1.0)
    log.flush()
    exits = [e for e in log.read(after=0)["events"] if e["kind"] == "exit"]
    assert exits[0]["data"]["left_running"] == 2
    assert describe(exits[0]) == "pid 10 exited 0; 2 process(es) it left running are stopped"
    _feed(log, inst, BackoffElapsed(), 2.0)
    _feed(log, inst, Launched(11, 2), 2.1)
    _feed(log, inst, Exited(0, None, pid=11), 3.0)
    log.flush()
    last = [e for e in log.read(after=0)["events"] if e["kind"] == "exit"][-1]
    assert "left_running" not in last["data"] and describe(last) == "pid 11 exited 0"


def test_a_requested_stop_says_so_and_a_probe_is_recorded_once_per_result(store) -> None:
    log, inst = _log(store), Instance(APP, 0)
    _feed(log, inst, Start(), 0.0)
    _feed(log, inst, Launched(10, 1), 0.1)
    note = LastProbe(Check.READINESS, "tcp 127.0.0.1:1", "connection refused", 1)
    for t in (0.2, 0.3, 0.4):
        _feed(log, inst, Probed(note), t)
    _feed(log, inst, StopRequested(), 1.0)
    _feed(log, inst, Exited(None, 15), 1.1)
    log.flush()
    kinds = [(e["kind"], describe(e)) for e in log.read(after=0)["events"]]
    assert kinds.count(("probe", "readiness: tcp 127.0.0.1:1: connection refused")) == 1
    assert ("exit", "pid 10 killed by SIGTERM (stopped by tenure)") in kinds


def test_an_event_line_never_shows_a_time_ahead_of_the_second_it_happened_in() -> None:
    at = 1_700_000_026.9997          # rounding the fraction would print :26.000
    line = _line({"id": 7, "at": at, "target": "web/api/0", "kind": "state",
                  "data": {"from": "starting", "to": "ready"}}, tty=False)
    second = time.strftime("%H:%M:%S", time.localtime(at))
    assert line == f"#7 {second}.999 web/api/0 state: starting → ready"


def test_following_waits_out_a_backend_between_generations_but_not_a_failing_one(
        monkeypatch) -> None:
    from types import SimpleNamespace

    from backend.cli import events as cli_events
    from protocol.errors import Internal, ShuttingDown
    monkeypatch.setattr("backend.cli.logs.FOLLOW_POLL_S", 0.0)
    monkeypatch.setattr(cli_events, "_tenure_stopped", lambda args, exc: False)
    args = SimpleNamespace(follow=True)
    answers: list[Any] = [ShuttingDown("handing over"), {"events": [], "more": False}]

    def call(_args: Any, method: str, params: dict[str, Any]) -> Any:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a
    assert cli_events._next(args, call, {"after": 3}) == {"events": [], "more": False}
    answers[:] = [Internal("a bug"), {"events": [], "more": False}]
    with pytest.raises(Internal):
        cli_events._next(args, call, {"after": 3})
    monkeypatch.setattr(cli_events, "_tenure_stopped", lambda args, exc: True)
    answers[:] = [ShuttingDown("handing over"), {"events": [], "more": False}]
    with pytest.raises(cli_events._Stopped):        # tenure down: nothing comes back
        cli_events._next(args, call, {"after": 3})


def _stopped_then(store: Any, *late: object) -> list[tuple[str, str]]:
    log, inst = _log(store), Instance(APP, 0)
    before = log.bounds()[1]                # the store is shared by the calls of a test
    _feed(log, inst, Start(), 0.0)
    _feed(log, inst, Launched(10, 1), 0.1)
    _feed(log, inst, StopRequested(), 1.0)
    for event in late:
        _feed(log, inst, event, 1.2)
    log.flush()
    return [(e["kind"], describe(e)) for e in log.read(after=before)["events"]
            if e["kind"] == "exit"]


def test_an_exit_told_by_the_stops_answer_is_recorded_once_whatever_comes_first(store
                                                                                ) -> None:
    by_stop = Stopped({"exit_code": None, "signal": 9, "core_dumped": False})
    once = [("exit", "pid 10 killed by SIGKILL (stopped by tenure)")]
    # the usual order: the exit's observation, then the stop's answer
    assert _stopped_then(store, Exited(None, 9), by_stop) == once
    # a drain held the observation back: the answer told it, the observation is stale
    # (was: a second exit, "pid None killed by SIGKILL", not requested)
    assert _stopped_then(store, by_stop, Exited(None, 9)) == once
    # a stop that found the process already gone tells no exit; a late one is no news
    assert _stopped_then(store, Stopped(), Exited(None, 9)) == []


def test_events_n_past_what_is_kept_is_refused_in_the_options_words(tmp_path, capsys) -> None:
    """It said the wire's `params.tail must be <= 100000`."""
    import json

    from backend.cli import events as cli_events
    from backend.cli.main import main
    assert cli_events.KEPT == ev.KEEP
    assert main(["--home", str(tmp_path / "h"), "--json", "events", "-n", "100001"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err == {"code": "BAD_REQUEST", "data": {"field": "n"},
                   "msg": "-n 100001: the event log keeps the newest 100,000; give at most "
                          "100000"}


@pytest.mark.parametrize("column, value", [("data", "{not json"), ("data", "[1]"),
                                           ("at", "noon"), ("kind", b"exit")])
def test_a_damaged_event_is_state_corrupt_naming_it(store, column: str, value: Any) -> None:
    """Data that was no JSON raised JSONDecodeError: `tenure events` answered INTERNAL."""
    from protocol.errors import StateCorrupt
    log = _log(store)
    for i in range(3):
        log.record("exit", "s/a/0", pid=i)
    log.flush()
    store.db.execute(f"UPDATE events SET {column} = ? WHERE id = 2", (value,))
    with pytest.raises(StateCorrupt) as err:
        log.read(after=0)
    assert err.value.msg.startswith("backend.db: event 2 cannot be read; a damaged")
    assert [e["id"] for e in log.read(after=2)["events"]] == [3]


class _Ended(Exception):
    """Ends a follow in a test (Ctrl-C does for a user)."""


def test_a_follower_that_falls_behind_past_pruning_is_told(store, monkeypatch, capsys
                                                          ) -> None:
    """Was: only the first page's gap was said; a follower left behind by more than the
    log keeps jumped from #5 to #156 with nothing on stderr."""
    from types import SimpleNamespace

    from backend.cli import events as cli
    monkeypatch.setattr(ev, "KEEP", 50)
    monkeypatch.setattr(ev, "PRUNE_EVERY", 10)
    monkeypatch.setattr(cli.time, "sleep", lambda s: None)
    log = _log(store)
    for i in range(5):
        log.record("exit", "s/a/0", n=i)
    log.flush()
    pages: list[dict[str, Any]] = []

    def call(args: Any, method: str, params: dict[str, Any]) -> Any:
        if len(pages) == 1:             # the log grows past what it keeps meanwhile
            for i in range(200):
                log.record("exit", "s/a/0", n=i)
                log.flush()
        if len(pages) == 3:
            raise _Ended
        pages.append(log.read(**{k: v for k, v in params.items() if k != "kinds"}))
        return pages[-1]
    a = SimpleNamespace(targets=[], kind=None, since="0", n=0, follow=True, json=True)
    with pytest.raises(_Ended):
        cli.follow_events(a, call)
    out, err = capsys.readouterr()
    ids = [json.loads(line)["id"] for line in out.splitlines()]
    oldest = log.bounds()[0]
    assert oldest > 6 and ids[:6] == [1, 2, 3, 4, 5, oldest] and pages[1]["gap"]
    assert err == f"tenure: events before #{oldest} were pruned (the log keeps the " \
                  "newest 100,000)\n", err


def test_a_stopped_followers_backend_db_is_not_read_through_a_link(
        store, tmp_path, capsys) -> None:
    """Was read through: with backend/ a symlink to another home's, `tenure events -f`
    whose tenure stopped printed that home's events as this one's. A FIFO named
    backend.db is refused too (it would block the follower for ever)."""
    from types import SimpleNamespace

    from backend.cli import events as cli
    from protocol.layout import Layout
    log = _log(store)
    log.record("exit", "s/a/0", pid=1)
    assert log.flush() == 1
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    lay = Layout(home)
    os.symlink(tmp_path, lay.backend)          # another home's backend/, events and all
    assert cli._left_in_file(SimpleNamespace(home=home), 0, {}) == []
    err = capsys.readouterr().err
    assert f"UNSAFE_PATH: {lay.backend} is a symlink" in err, err
    os.unlink(lay.backend)
    lay.backend.mkdir(mode=0o700)
    os.mkfifo(lay.backend_db)
    assert cli._left_in_file(SimpleNamespace(home=home), 0, {}) == []
    err = capsys.readouterr().err
    assert f"{lay.backend_db} is " in err and "UNSAFE_PATH" in err, err
