"""The queued-config spool (backend.spool): each row of its table, with a fake admit
and real files; the backend's real path is in tests/integration/stack/test_up_no_wait.py."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from backend import queuefile, spool
from protocol.errors import (
    ConfigInvalid,
    OperationInProgress,
    OwnerChanged,
    StateCorrupt,
    TransportLost,
)


class FakeAdmit:
    """Answers admit calls in turn: a dict is the operation, an exception is raised.
    ``during`` runs inside the call (a newer `up` queueing meanwhile, say)."""

    def __init__(self, *answers: Any, during: Any = None) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, str]] = []
        self.during = during

    async def __call__(self, text: str, source: str, request_id: str) -> dict[str, Any]:
        self.calls.append((text, source, request_id))
        if self.during is not None:
            self.during()
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return dict(answer)


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "queued-config.json")


def take(s: spool.Spool) -> str | None:
    return asyncio.run(s.take())


def make(path: str, admit: FakeAdmit) -> tuple[spool.Spool, list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    return spool.Spool(path, admit, lambda kind, **d: events.append((kind, d))), events


def files(path: str) -> list[str]:
    return sorted(os.listdir(os.path.dirname(path)))


def test_queue_writes_a_private_record_and_answers_without_the_text(path: str) -> None:
    rec = queuefile.queue(path, "[stacks]\n", "/etc/t.toml")
    assert "text" not in rec and rec["source"] == "/etc/t.toml"
    assert rec["request_id"].startswith("up-") and len(rec["request_id"]) == 19
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert queuefile.read_queued(path)["text"] == "[stacks]\n"
    assert queuefile.queue(path, "", "/x")["request_id"] != rec["request_id"]


def test_nothing_queued_is_nothing_to_do(path: str) -> None:
    s, events = make(path, FakeAdmit())
    assert take(s) is None
    assert files(path) == [] and events == []


def test_an_admitted_queue_is_removed_and_recorded(path: str) -> None:
    rec = queuefile.queue(path, "text", "/src.toml")
    admit = FakeAdmit({"id": "op-1", "stage": "running"})
    s, events = make(path, admit)
    assert take(s) == "admitted"
    assert admit.calls == [("text", "/src.toml", rec["request_id"])]
    assert files(path) == []
    assert events == [("queued-config", {"outcome": "admitted", "operation": "op-1",
                                         "request_id": rec["request_id"],
                                         "source": "/src.toml"})]
    assert take(s) is None


def test_nothing_to_change_is_removed_too(path: str) -> None:
    queuefile.queue(path, "text", "/src.toml")
    s, events = make(path, FakeAdmit({"id": None, "outcome": "no-change"}))
    assert take(s) == "no-change"
    assert files(path) == [] and events[0][1]["outcome"] == "no-change"


@pytest.mark.parametrize("busy", [OperationInProgress("op-9 owns s"),
                                  TransportLost("owner away"),
                                  OwnerChanged("the owner was replaced")])
def test_busy_keeps_the_taken_config_for_the_next_tick(path: str, busy: Exception) -> None:
    rec = queuefile.queue(path, "text", "/src.toml")
    admit = FakeAdmit(busy, busy, {"id": "op-2"})
    s, events = make(path, admit)
    assert take(s) == "busy"
    assert files(path) == ["queued-config.taken.json"] and events == []
    assert take(s) == "busy"
    assert take(s) == "admitted"
    assert [c[2] for c in admit.calls] == [rec["request_id"]] * 3
    assert files(path) == []


def test_a_refused_config_is_set_aside_with_its_code(path: str) -> None:
    rid = queuefile.queue(path, "command = 3", "/src.toml")["request_id"]
    s, events = make(path, FakeAdmit(ConfigInvalid("line 1: bad")))
    assert take(s) == "rejected"
    assert files(path) == ["queued-config.rejected.json"]
    assert events == [("queued-config", {"outcome": "rejected", "code": "CONFIG_INVALID",
                                         "msg": "line 1: bad", "file": s.rejected,
                                         "request_id": rid})]
    assert s.result(rid) == {"state": "rejected", "code": "CONFIG_INVALID",
                             "msg": "line 1: bad"}
    assert take(s) is None   # not tried again


def test_each_request_is_remembered_with_its_plan_and_pending_ones_named(path: str) -> None:
    first = queuefile.queue(path, "a", "/a.toml")["request_id"]
    assert queuefile.pending(path) == {first}
    plan = {"id": "plan-1", "changes": [{"action": "start"}]}
    s, _ = make(path, FakeAdmit({"id": "op-1", "planned": plan},
                                {"id": None, "outcome": "no-change", "planned": plan}))
    assert s.result(first) is None
    assert take(s) == "admitted" and s.operation == "op-1"
    assert s.result(first) == {"state": "admitted", "operation": "op-1", "plan": plan,
                               "joined": False}
    second = queuefile.queue(path, "b", "/b.toml")["request_id"]
    os.rename(path, path.replace(".json", ".taken.json"))
    assert queuefile.pending(path) == {second}   # taken, and not decided yet
    assert take(s) == "no-change" and s.operation is None
    assert s.result(second)["state"] == "no-change" and queuefile.pending(path) == set()
    for n in range(spool.RESULTS_KEPT):   # only the newest are kept
        s._keep(f"r{n}", {"state": "no-change"})
    assert s.result(first) is None and s.result(f"r{spool.RESULTS_KEPT - 1}") is not None


def test_a_corrupt_queue_is_rejected_and_admits_nothing(path: str) -> None:
    Path(path).write_text("{not json")
    os.chmod(path, 0o600)
    admit = FakeAdmit()
    s, events = make(path, admit)
    assert take(s) == "rejected"
    assert admit.calls == [] and events[0][1]["code"] == "STATE_CORRUPT"
    Path(path).write_text(json.dumps({"kind": "queued-config", "format": 1, "text": 3,
                                      "source": "/s", "request_id": "r", "queued_at": 1}))
    assert take(s) == "rejected" and admit.calls == []


@pytest.mark.parametrize("at", [True, float("nan"), float("-inf"), -1, 10**400, "1"])
def test_a_queued_at_that_is_no_time_is_state_corrupt(path: str, at: object) -> None:
    Path(path).write_text(json.dumps({"kind": "queued-config", "format": 1, "text": "",
                                      "source": "/s", "request_id": "r", "queued_at": at}))
    os.chmod(path, 0o600)
    with pytest.raises(StateCorrupt, match="queued_at is not a time"):
        queuefile.read_queued(path)


def test_a_symlink_is_never_followed(path: str, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    queuefile.queue(str(target), "text", "/src.toml")
    os.symlink(target, path)
    admit = FakeAdmit()
    s, events = make(path, admit)
    assert take(s) == "rejected"
    assert admit.calls == [] and events[0][1]["code"] == "UNSAFE_PATH"
    assert os.path.islink(s.rejected) and target.exists()


def test_a_newer_queue_during_the_apply_is_not_lost(path: str) -> None:
    first = queuefile.queue(path, "first", "/a.toml")
    second: dict[str, Any] = {}
    admit = FakeAdmit({"id": "op-1"}, {"id": "op-2"},
                      during=lambda: second or second.update(queuefile.queue(path, "second",
                                                                         "/b.toml")))
    s, _ = make(path, admit)
    assert take(s) == "admitted"
    assert files(path) == ["queued-config.json"]
    assert take(s) == "admitted"
    assert [(c[0], c[2]) for c in admit.calls] == [("first", first["request_id"]),
                                                   ("second", second["request_id"])]


def test_a_taken_config_left_by_a_dead_generation_goes_first(path: str) -> None:
    old = queuefile.queue(path, "old", "/a.toml")
    os.rename(path, path.replace(".json", ".taken.json"))
    queuefile.queue(path, "new", "/b.toml")
    admit = FakeAdmit({"id": "op-1"}, {"id": "op-2"})
    s, _ = make(path, admit)
    assert take(s) == "admitted" and admit.calls[0][2] == old["request_id"]
    assert take(s) == "admitted" and admit.calls[1][0] == "new"


def test_the_unexpected_ends_as_a_coded_rejection(path: str) -> None:
    queuefile.queue(path, "text", "/src.toml")
    s, events = make(path, FakeAdmit(KeyError("boom")))
    assert take(s) == "rejected"
    assert events[0][1]["code"] == "INTERNAL"
    assert files(path) == ["queued-config.rejected.json"]


def test_run_takes_only_while_in_control() -> None:
    ticks: list[str] = []
    sleeps: list[float] = []

    class Stop(Exception):
        pass

    class Counting(spool.Spool):
        async def take(self) -> str | None:
            ticks.append("take")
            return None

    async def sleep(s: float) -> None:
        sleeps.append(s)
        if len(sleeps) == 3:
            raise Stop

    control = iter([False, True, False])
    told: list[tuple[str | None, str | None]] = []
    with pytest.raises(Stop):
        asyncio.run(spool.run(Counting("/nonexistent/q.json", FakeAdmit()),
                              lambda: next(control), sleep,
                              lambda outcome, op: told.append((outcome, op))))
    assert ticks == ["take"] and sleeps == [spool.TICK_S] * 3
    assert told == [(None, None)]   # each take is told, nothing else


def test_state_names_what_status_shows(path: str) -> None:
    assert queuefile.state(path) is None
    queuefile.queue(path, "text", "/src.toml")
    assert queuefile.state(path) == "waiting"
    os.rename(path, path.replace(".json", ".taken.json"))
    assert queuefile.state(path) == "waiting"
    os.rename(path.replace(".json", ".taken.json"), path.replace(".json", ".rejected.json"))
    assert queuefile.state(path) == "rejected"
    queuefile.queue(path, "again", "/src.toml")            # a newer queue waits: it says so
    assert queuefile.state(path) == "waiting"


def test_an_admitted_queue_that_cannot_be_removed_is_not_taken_again(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    queuefile.queue(path, "text", "/src.toml")
    admit = FakeAdmit({"id": "op-1"})
    s, events = make(path, admit)
    real = os.unlink

    def failing(p: str, *a: Any, **k: Any) -> None:
        if p == s.taken:
            raise OSError(5, "Input/output error")
        real(p, *a, **k)
    monkeypatch.setattr(spool.os, "unlink", failing)
    assert take(s) == "admitted"
    assert [e[1]["outcome"] for e in events] == ["admitted"]      # never "rejected"
    assert take(s) is None and take(s) is None and len(admit.calls) == 1
    assert not s.waits()   # left as it is: nothing waits to be decided
    assert s.result(queuefile.read_queued(s.taken)["request_id"])["state"] == "admitted"


def test_a_queue_that_cannot_be_set_aside_is_reported_once(path: str) -> None:
    os.mkdir(path)                                   # not a file: refused
    Path(path.replace(".json", ".rejected.json")).write_text("an older one\n")
    s, events = make(path, FakeAdmit())
    assert take(s) == "rejected"                     # a directory cannot replace a file
    assert take(s) is None and take(s) is None
    assert [e[1]["code"] for e in events] == ["UNSAFE_PATH"]


def test_a_queue_that_cannot_be_taken_waits(path: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    queuefile.queue(path, "text", "/src.toml")

    def failing(a: str, b: str) -> None:
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(spool.os, "rename", failing)
    s, events = make(path, FakeAdmit())
    assert take(s) == "busy" and take(s) == "busy" and events == []
    monkeypatch.undo()
    admit = FakeAdmit({"id": "op-1"})
    s._admit = admit
    assert take(s) == "admitted"


def _unlink_fails_for(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    real = os.unlink

    def failing(p: str, *a: Any, **k: Any) -> None:
        if p == name:
            raise OSError(5, "Input/output error")
        real(p, *a, **k)
    monkeypatch.setattr(spool.os, "unlink", failing)


def test_a_taken_file_that_cannot_be_removed_blocks_no_newer_queue(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    first = queuefile.queue(path, "A", "/a.toml")["request_id"]
    admit = FakeAdmit({"id": "op-1"}, {"id": "op-2"})
    s, events = make(path, admit)
    _unlink_fails_for(monkeypatch, s.taken)
    assert take(s) == "admitted" and not s.waits()
    second = queuefile.queue(path, "B", "/b.toml")["request_id"]
    assert s.waits()                                   # the newer one waits to be taken
    assert [take(s) for _ in range(20)].count("admitted") == 1
    assert [(c[0], c[2]) for c in admit.calls] == [("A", first), ("B", second)]
    assert [e[1]["request_id"] for e in events] == [first, second]
    assert not s.waits()                               # B is settled too, and left
    assert s.result(second)["state"] == "admitted"


@pytest.fixture
def store(path: str):
    from backend.store import BackendStore
    st = BackendStore(os.path.join(os.path.dirname(path), "backend.db"))
    try:
        yield st
    finally:
        st.close()


@pytest.mark.parametrize("answer", [{"id": None, "outcome": "no-change"},
                                    {"id": "op-1", "joined": True}])
def test_a_decided_taken_file_is_not_applied_again_by_a_later_generation(
        path: str, store: Any, answer: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from backend.events import EventLog
    rid = queuefile.queue(path, "OLD", "/a.toml")["request_id"]
    first = FakeAdmit(answer)
    log1 = EventLog(store, "a1")
    s1 = spool.Spool(path, first, log1.record)
    _unlink_fails_for(monkeypatch, s1.taken)
    assert take(s1) == answer.get("outcome", "admitted")
    log1.flush()                                       # the generation's persist round
    later = FakeAdmit({"id": None, "outcome": "no-change"})
    s2 = spool.Spool(path, later, EventLog(store, "a2").record)
    assert not s2.waits()                              # nothing to defer instances for
    assert take(s2) is None and take(s2) is None
    assert [c[0] for c in first.calls + later.calls] == ["OLD"]
    assert queuefile.read_queued(s2.taken)["request_id"] == rid   # left for the operator
    newer = queuefile.queue(path, "NEW", "/b.toml")["request_id"]
    later.answers = [{"id": "op-2"}]
    assert take(s2) == "admitted" and later.calls[-1][2] == newer


def test_a_taken_file_the_log_does_not_name_is_taken_again(path: str, store: Any) -> None:
    from backend.events import EventLog
    log = EventLog(store, "a1")
    log.record("queued-config", outcome="no-change", request_id="up-other")
    log.flush()
    queuefile.queue(path, "text", "/a.toml")
    os.rename(path, path.replace(".json", ".taken.json"))  # a generation died applying it
    admit = FakeAdmit({"id": "op-1"})
    s = spool.Spool(path, admit)
    assert s.waits() and take(s) == "admitted" and len(admit.calls) == 1


def test_a_log_that_cannot_be_read_keeps_the_taken_file_waiting(path: str) -> None:
    import sqlite3
    queuefile.queue(path, "text", "/a.toml")
    os.rename(path, path.replace(".json", ".taken.json"))
    answers: list[Any] = [sqlite3.OperationalError("disk I/O error"),
                          sqlite3.OperationalError("disk I/O error"), None]

    def decided(request_id: str) -> dict[str, Any] | None:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    admit = FakeAdmit({"id": "op-1"})
    s = spool.Spool(path, admit, decided=decided)
    assert s.waits()
    assert take(s) == "busy" and admit.calls == []
    assert take(s) == "admitted" and len(admit.calls) == 1


def test_a_decided_taken_file_a_dead_generation_left_is_removed(path: str,
                                                                store: Any) -> None:
    """Decided and its event written, then the generation died before it removed the
    file: the next one removes it, applies nothing, and takes a newer queue."""
    from backend.events import EventLog
    rid = queuefile.queue(path, "OLD", "/a.toml")["request_id"]
    os.rename(path, path.replace(".json", ".taken.json"))
    log = EventLog(store, "a1")
    log.record("queued-config", outcome="no-change", request_id=rid)
    log.flush()
    admit = FakeAdmit({"id": "op-2"})
    s = spool.Spool(path, admit)
    assert not s.waits() and not os.path.lexists(s.taken)
    assert take(s) is None and admit.calls == []
    newer = queuefile.queue(path, "NEW", "/b.toml")["request_id"]
    assert take(s) == "admitted" and admit.calls[-1][2] == newer
