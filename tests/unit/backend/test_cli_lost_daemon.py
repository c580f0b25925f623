"""A connection to the guardian or the owner lost during a call, said with what to run
next when that daemon is not running any more: `tenure backend upgrade` against a
guardian killed mid-way said only `TRANSPORT_LOST: upgrade: connection lost (…)`."""

from __future__ import annotations

import socket
from pathlib import Path

from backend.cli.main import _lost_daemon
from protocol.errors import TransportLost


def _lost(path: Path) -> TransportLost:
    return TransportLost("upgrade: connection lost (server closed the connection)",
                         {"path": str(path)}, request_id=3)


def test_a_guardian_gone_is_said_with_the_way_on(tmp_path: Path) -> None:
    exc = _lost_daemon(_lost(tmp_path / "guardian.sock"))
    assert exc.msg == ("upgrade: connection lost (server closed the connection); the "
                       "guardian went away during the call and is not running now (stopped, or it "
                       "died): "
                       "`tenure up` starts it again, and `tenure backend status` then "
                       "says how what was asked of it ended")
    assert exc.data["request_id"] == 3


def test_an_owner_gone_points_at_status(tmp_path: Path) -> None:
    exc = _lost_daemon(_lost(tmp_path / "owner.sock"))
    assert exc.msg.endswith("the owner went away during the call and is not running "
                            "now (stopped, or it died): `tenure status` says what became "
                            "of its apps and what to do")


def test_a_daemon_that_still_listens_is_left_unsaid(tmp_path: Path) -> None:
    """The connection broke, but the guardian runs: nothing more is known."""
    path = tmp_path / "guardian.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        listener.listen()
        exc = _lost_daemon(_lost(path))
    assert exc.msg == "upgrade: connection lost (server closed the connection)"


def test_another_socket_is_left_unsaid(tmp_path: Path) -> None:
    exc = _lost_daemon(_lost(tmp_path / "api.sock"))
    assert exc.msg == "upgrade: connection lost (server closed the connection)"
