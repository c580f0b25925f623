"""`tenure up --config` on a home whose daemons were down: how the command reads the
end of the config it queued (backend.cli.lifecycle._queued_apply, opwait.wait_queued)
from a fake backend; the real path is in
tests/integration/workflow/test_up_new_config_cold.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from backend import queuefile
from backend.cli import lifecycle, plans
from protocol.errors import ConfigInvalid, NotFound, RequestTimedOut, UnknownMethod


class Backend:
    """Answers ``queue.show`` with ``shows`` in turn (the last one again), ``op.show``
    with ``op``; records every call."""

    def __init__(self, *shows: Any, op: dict[str, Any] | None = None) -> None:
        self.shows, self.op = list(shows), op
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, args: Any, method: str, params: dict[str, Any] | None = None,
                 timeout: float = 300.0) -> Any:
        self.calls.append((method, dict(params or {})))
        if method == "op.show":
            return self.op
        answer = self.shows.pop(0) if len(self.shows) > 1 else self.shows[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, backend: Backend,
         rid: str = "up-1", timeout: float = 5.0, older: Any = None) -> dict[str, Any]:
    monkeypatch.setattr(lifecycle, "_call", backend)
    monkeypatch.setattr(plans, "_call", backend)   # the wait for its operation
    layout = SimpleNamespace(queued_config=str(tmp_path / "queued-config.json"))
    args = SimpleNamespace(timeout=timeout, json=True)
    return lifecycle._queued_apply(args, layout, rid, True,
                                   older or (lambda: pytest.fail("not an older backend")))


def test_an_admitted_config_is_waited_for_and_answers_as_an_apply(monkeypatch, tmp_path):
    plan = {"id": "plan-1", "changes": [{"action": "start", "app": "s/a"}]}
    backend = Backend({"state": "waiting"},
                      {"state": "admitted", "plan": plan,
                       "operation": {"id": "op-1", "outcome": None}},
                      op={"id": "op-1", "outcome": "success", "changes": plan["changes"]})
    out = _run(monkeypatch, tmp_path, backend)
    assert out == {"plan": plan, "request_id": "up-1",
                   "operation": {"id": "op-1", "outcome": "success",
                                 "changes": plan["changes"]}}
    assert [m for m, _ in backend.calls] == ["queue.show", "queue.show", "op.show"]


def test_nothing_to_change_is_no_change(monkeypatch, tmp_path):
    out = _run(monkeypatch, tmp_path, Backend({"state": "no-change", "plan": None,
                                               "operation": None}))
    assert out["operation"] == {"id": None, "outcome": "no-change", "changes": []}
    assert out["plan"] == {"changes": []}


def test_a_rejected_config_is_its_error_and_not_kept(monkeypatch, tmp_path):
    queued = str(tmp_path / "queued-config.json")
    rid = queuefile.queue(queued, "text", "/a.toml")["request_id"]
    rejected = queuefile.files(queued)[2]
    Path(queued).rename(rejected)
    backend = Backend({"state": "rejected", "code": "CONFIG_INVALID",
                       "msg": "/a.toml:2: stacks.s.apps.a.user: unknown user"})
    with pytest.raises(ConfigInvalid) as err:
        _run(monkeypatch, tmp_path, backend, rid=rid)
    assert err.value.msg == "/a.toml:2: stacks.s.apps.a.user: unknown user"
    assert err.value.data == {"request_id": rid}
    assert not Path(rejected).exists()
    # another request's rejected file is the operator's: left as it is
    other = queuefile.queue(queued, "text", "/b.toml")["request_id"]
    Path(queued).rename(rejected)
    with pytest.raises(ConfigInvalid):
        _run(monkeypatch, tmp_path, backend, rid="up-mine")
    assert queuefile.read_queued(rejected)["request_id"] == other


def test_a_request_no_backend_can_tell_of_is_not_found(monkeypatch, tmp_path):
    with pytest.raises(NotFound, match="has no word of how the config queued as request"):
        _run(monkeypatch, tmp_path, Backend({"state": "unknown"}))


def test_a_queue_not_taken_in_time_times_out_and_stays_queued(monkeypatch, tmp_path):
    with pytest.raises(RequestTimedOut, match="it stays queued") as err:
        _run(monkeypatch, tmp_path, Backend({"state": "waiting"}), timeout=0.0)
    assert err.value.data == {"request_id": "up-1"}


def test_an_older_backend_is_planned_and_applied_as_before(monkeypatch, tmp_path):
    applied = {"plan": {"changes": []}, "operation": {"id": None, "outcome": "no-change"}}
    out = _run(monkeypatch, tmp_path, Backend(UnknownMethod("no method queue.show")),
               older=lambda: applied)
    assert out is applied
