"""How the CLI tells "no backend answers" from an error the backend answered with
(backend.cli.everyday.call). Was: only the first connect was covered; a backend that
closed its connection right after it (`tenure down`, a handoff) made the call connect
again inside, and that failure surfaced as a bare CONNECT_FAILED: `events -f` exited 3
instead of ending as tenure stopped."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from backend.cli import everyday
from protocol.errors import BackendUnavailable, ConnectFailed


class FakeClient:
    def __init__(self, exc: Exception, connected: bool) -> None:
        self.exc, self.connected = exc, connected

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def call(self, method: str, params: Any) -> Any:
        raise self.exc


@pytest.fixture
def args(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Any:
    monkeypatch.setattr(everyday, "diagnostics", lambda a: None)
    monkeypatch.setattr(everyday, "stopped", lambda lay: {"owner": None})
    return SimpleNamespace(home=tmp_path)


def test_a_connect_that_fails_inside_the_call_is_no_backend(monkeypatch, args) -> None:
    lost = ConnectFailed("no socket at api.sock", {"path": "api.sock"})
    monkeypatch.setattr(everyday, "api", lambda a, t: FakeClient(lost, connected=False))
    with pytest.raises(BackendUnavailable) as info:
        everyday.call(args, "events.read")
    assert info.value.data["stopped"] == {"owner": None}


def test_the_backends_own_connect_failed_is_raised_as_it_is(monkeypatch, args) -> None:
    answered = ConnectFailed("cannot connect to owner.sock", {"path": "owner.sock"})
    monkeypatch.setattr(everyday, "api", lambda a, t: FakeClient(answered, connected=True))
    with pytest.raises(ConnectFailed) as info:
        everyday.call(args, "status")
    assert info.value is answered


def test_diagnostics_of_daemons_that_are_gone_are_not_shown_as_current(
        monkeypatch, tmp_path) -> None:
    """After `tenure down`, BACKEND_UNAVAILABLE 'tenure is not running' still carried
    the guardian's last file: backend alive and answering, owner link connected."""
    import os

    from protocol.durable import atomic_write_json
    from protocol.layout import Layout
    diag = {"kind": "tenure-supervisor-state", "format": 1, "updated_at": 1.0,
            "backend": {"pid": 1, "alive": True, "answering": True},
            "owner_link": {"state": "connected"}, "blocked": None}
    path = Layout(tmp_path).diagnostics
    os.makedirs(os.path.dirname(path), mode=0o700)
    atomic_write_json(path, diag)
    lost = ConnectFailed("no socket at api.sock", {"path": "api.sock"})
    monkeypatch.setattr(everyday, "api", lambda a, t: FakeClient(lost, connected=False))
    args = SimpleNamespace(home=tmp_path)
    monkeypatch.setattr(everyday, "stopped", lambda lay: {"owner": None})
    with pytest.raises(BackendUnavailable) as info:
        everyday.call(args, "events.read")
    data = info.value.data
    assert (data["diagnostics"], data["stopped"]) == (None, {"owner": None}), data
    monkeypatch.setattr(everyday, "stopped", lambda lay: None)   # the guardian runs
    monkeypatch.setattr(everyday, "listens", lambda sock: True)
    with pytest.raises(BackendUnavailable) as info:
        everyday.call(args, "events.read")
    assert info.value.data["diagnostics"]["backend"]["answering"] is True


def _stale_diagnostics(home: Any) -> None:
    """The file a guardian left: a backend "alive" and a check-only upgrade."""
    import os
    import time

    from protocol.durable import atomic_write_json
    from protocol.layout import Layout
    path = Layout(home).diagnostics
    os.makedirs(os.path.dirname(path), mode=0o700)
    atomic_write_json(path, {
        "kind": "tenure-supervisor-state", "format": 1, "updated_at": time.time() - 7,
        "backend": {"pid": 1, "alive": True, "answering": True}, "blocked": None,
        "last_activation": {"id": "a7", "kind": "upgrade", "phase": "complete",
                            "outcome": "check-only"}})


def test_a_guardian_gone_is_why_no_backend_answers_not_its_last_diagnostics(
        monkeypatch, tmp_path) -> None:
    """Was, from `logs`, `events`, `inspect`, `op list`, `top` and `job logs` with the
    guardian killed: "no backend generation answers; last activation … upgrade is
    complete; guardian diagnostics 7s old" (that upgrade a --check), the data carrying the
    dead backend "alive": nothing said that none is coming, nor why, as `status` did."""
    from backend.cli import holders
    _stale_diagnostics(tmp_path)
    lost = ConnectFailed("no socket at api.sock", {"path": "api.sock"})
    monkeypatch.setattr(everyday, "api", lambda a, t: FakeClient(lost, connected=False))
    monkeypatch.setattr(everyday, "stopped", lambda lay: None)   # the owner runs
    monkeypatch.setattr(everyday, "listens", lambda sock: False)
    monkeypatch.setattr(holders, "lock_holder", lambda sock, module: None)
    monkeypatch.setattr(holders, "listener", lambda sock, module: None)
    with pytest.raises(BackendUnavailable) as info:
        everyday.call(SimpleNamespace(home=tmp_path), "events.read")
    exc = info.value
    assert exc.msg == ("no backend generation answers, and none is coming; the guardian "
                       "is not running, so none is started: `tenure up` starts it "
                       "(applications keep running)"), exc.msg
    assert exc.data["diagnostics"] is None and exc.data["guardian_running"] is False


def test_the_last_activation_is_said_with_its_outcome(monkeypatch, tmp_path) -> None:
    """Was "last activation a7 upgrade is complete": of a `backend upgrade --check`,
    which upgraded nothing."""
    _stale_diagnostics(tmp_path)
    lost = ConnectFailed("no socket at api.sock", {"path": "api.sock"})
    monkeypatch.setattr(everyday, "api", lambda a, t: FakeClient(lost, connected=False))
    monkeypatch.setattr(everyday, "stopped", lambda lay: None)
    monkeypatch.setattr(everyday, "listens", lambda sock: True)   # the guardian runs
    with pytest.raises(BackendUnavailable) as info:
        everyday.call(SimpleNamespace(home=tmp_path), "events.read")
    assert "last activation a7 upgrade is complete (check-only)" in info.value.msg
    assert info.value.data["diagnostics"]["last_activation"]["id"] == "a7"
