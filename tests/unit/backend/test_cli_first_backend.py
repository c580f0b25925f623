"""`tenure up` waiting for its first backend: it stops as soon as the guardian has given
up (RECOVERY_BLOCKED, with why and what to do), and at its timeout it says why the last
start failed; the guardian's view is asked at most every GUARDIAN_LOOK_S."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend.cli import backendwait, firstrun
from protocol.errors import BackendUnavailable, RecoveryBlocked
from protocol.layout import Layout

FAILED = {"outcome": "failed", "error": "backend exited before it was ready (exit status 1): "
                                        "SyntaxError: invalid syntax"}


def waiting(monkeypatch: pytest.MonkeyPatch, views: list[dict[str, Any] | None]) -> list[int]:
    """No backend answers; the guardian says ``views`` one after the other (the last one
    from then on). Returns the count of looks, as it grows."""
    looks = [0]

    def view(_layout: Layout) -> dict[str, Any] | None:
        looks[0] += 1
        return views[min(looks[0], len(views)) - 1]
    monkeypatch.setattr(backendwait, "ping", lambda *a, **k: None)
    monkeypatch.setattr(backendwait, "guardian_view", view)
    monkeypatch.setattr(backendwait, "GUARDIAN_LOOK_S", 0.05)
    return looks


def test_it_stops_once_the_guardian_gave_up(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    blocked = {"blocked": {"code": "HANDOFF_FAILED", "reason": "SyntaxError (after 6 "
                                                                 "attempts)"}}
    looks = waiting(monkeypatch, [{"blocked": None, "recent": [FAILED]}, blocked])
    with pytest.raises(RecoveryBlocked) as caught:
        backendwait.ensure_backend(Layout(tmp_path), timeout=30)
    assert looks[0] == 2   # the second look, 0.05 s in: not the whole timeout
    assert caught.value.msg == ("the guardian gave up starting a backend: HANDOFF_FAILED: "
                                "SyntaxError (after 6 attempts); once that is fixed, run "
                                "`tenure backend recover`")
    assert caught.value.data == {"cause": "HANDOFF_FAILED"}


@pytest.mark.parametrize(("code", "said"), [
    ("UNSAFE_PATH", "UNSAFE_PATH: /h/backend/backend.db is open to other users"),
    ("RECOVERY_BLOCKED", "/h/backend/backend.db is open to other users"),   # said once
    (None, "/h/backend/backend.db is open to other users")])
def test_the_message_names_the_cause_and_its_code(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path, code: str | None,
                                                  said: str) -> None:
    """`tenure up` on a home whose backend.db others may read: the path and UNSAFE_PATH
    (was: the path only; the code was in data.cause alone)."""
    blocked = {"code": code, "reason": "/h/backend/backend.db is open to other users"}
    waiting(monkeypatch, [{"blocked": blocked}])
    with pytest.raises(RecoveryBlocked) as caught:
        backendwait.ensure_backend(Layout(tmp_path), timeout=30)
    assert caught.value.msg == (f"the guardian gave up starting a backend: {said}; once "
                                "that is fixed, run `tenure backend recover`")


def test_at_its_timeout_it_says_why_the_last_start_failed(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    waiting(monkeypatch, [{"blocked": None, "recent": [FAILED, {"outcome": "success"}]}])
    with pytest.raises(BackendUnavailable) as caught:
        backendwait.ensure_backend(Layout(tmp_path), timeout=0.2, waited=20)
    assert " within 20 s; its last start failed: backend exited before it was ready " \
           "(exit status 1): SyntaxError: invalid syntax (the guardian tries again); " \
           "see `tenure backend status`" in caught.value.msg


def test_at_its_timeout_it_says_the_recovery_is_failing(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """A generation that reached READY and crashed 1.5 s later: its activation succeeded,
    so `up` said nothing of why (or, after a failed retry, only that retry's start), though
    the guardian counts the crash and waits to try again."""
    import time
    failing = {"attempt": 2, "attempts": 7, "retry_at": time.time() + 4.5,
               "error": "HANDOFF_FAILED: backend generation 5 (pid 123) exited 1.5 s "
                        "after it started (exit status 7)"}
    waiting(monkeypatch, [{"blocked": None, "recovery_failing": failing,
                           "backend": {"pid": 124, "alive": True},   # the next attempt
                           "recent": [{"outcome": None}, {"outcome": "success"}, FAILED]}])
    with pytest.raises(BackendUnavailable) as caught:
        backendwait.ensure_backend(Layout(tmp_path), timeout=0.2, waited=20)
    assert " within 20 s; recovery is failing: attempt 2 of 7 ended HANDOFF_FAILED: " \
           "backend generation 5 (pid 123) exited 1.5 s after it started (exit status 7); " \
           "the guardian tries again in " in caught.value.msg, caught.value.msg
    assert caught.value.msg.endswith(" and blocks after the last; see `tenure backend "
                                     "status`"), caught.value.msg
    assert "its last start failed" not in caught.value.msg


def test_at_its_timeout_it_says_the_backend_alive_but_not_answering(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`up --timeout 10` against a hung backend said only 'no backend answered', though
    the guardian (and `tenure status`) knew it alive but not answering."""
    import time
    silent = {"pid": 4242, "alive": True, "answering": False,
              "unanswered_since": time.time() - 12, "unanswered_why": "TIMEOUT"}
    waiting(monkeypatch, [{"blocked": None, "backend": silent, "recent": [FAILED]}])
    with pytest.raises(BackendUnavailable) as caught:
        backendwait.ensure_backend(Layout(tmp_path), timeout=0.2, waited=10)
    assert " within 10 s; the backend (pid 4242) is alive but NOT ANSWERING for 12" \
        in caught.value.msg, caught.value.msg
    assert "(TIMEOUT): it may be hung (docs/recover.md)" in caught.value.msg


@pytest.mark.parametrize("view", [None, {"blocked": None, "recent": []},
                                  {"blocked": None, "recent": [{"outcome": "success"}]}])
def test_without_a_failure_to_name_it_says_only_that_none_answered(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, view: dict[str, Any] | None) -> None:
    waiting(monkeypatch, [view])
    with pytest.raises(BackendUnavailable) as caught:
        backendwait.ensure_backend(Layout(tmp_path), timeout=0.1)
    assert caught.value.msg.endswith(" within 0.1 s; see `tenure backend status`")


@pytest.mark.parametrize(("view", "said"), [
    (None, "waiting for the guardian"),
    ({"blocked": None, "last_activation": {"kind": "start", "phase": "spawned",
                                           "outcome": None}}, "backend start: spawned"),
    ({"blocked": None, "recent": [FAILED]}, "its last start failed: backend exited before "
     "it was ready (exit status 1): SyntaxError: invalid syntax (the guardian tries again)"),
    ({"blocked": None, "last_activation": {"kind": "start", "phase": "complete",
                                           "outcome": "success"}}, "waiting for the backend"),
])
def test_the_progress_line_says_what_the_wait_waits_on(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, view: dict[str, Any] | None,
        said: str) -> None:
    """`up` on a terminal shows it while it waits (was: nothing until its timeout)."""
    waiting(monkeypatch, [view])
    assert backendwait.backend_probe(Layout(tmp_path))() == said


def test_the_first_select_waits_for_the_guardians_own_start() -> None:
    """The guardian answers before its boot is done and refuses a select while it boots
    (its command lock): a first `tenure up` on a busy machine failed OPERATION_IN_PROGRESS
    'another command runs (select refused)'."""
    from protocol.errors import OperationInProgress

    class Booting:
        def __init__(self) -> None:
            self.asked = 0

        def call(self, method: str, params: Any = None, **kw: Any) -> Any:
            self.asked += 1
            if self.asked < 3:
                raise OperationInProgress("another command runs (select refused)")
            return {"selected": params["release"]}

    g = Booting()
    firstrun._select_first(g, "ab" * 32, 5.0)   # type: ignore[arg-type]
    assert g.asked == 3
    g.asked = -10**6
    with pytest.raises(OperationInProgress):
        firstrun._select_first(g, "ab" * 32, 0.1)   # type: ignore[arg-type]
