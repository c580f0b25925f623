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
    monkeypatch.setattr(everyday, "_diagnostics", lambda a: None)
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
    assert info.value.data == {"diagnostics": None, "stopped": {"owner": None}}
    monkeypatch.setattr(everyday, "stopped", lambda lay: None)   # the guardian runs
    with pytest.raises(BackendUnavailable) as info:
        everyday.call(args, "events.read")
    assert info.value.data["diagnostics"]["backend"]["answering"] is True
