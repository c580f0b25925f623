"""Whether a listener answers at a Unix socket path, asked without waiting
(protocol.sockets.unix_live), and the two places that ask it: the backend's plan check
and the owner's bind of an app socket. A listener whose accept queue is full made a
blocking connect wait for as long as it stayed full: the plan never answered, or the
owner's whole loop (supervision, notify, log capture) stood still."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from owner.sockets import SocketDecl, SocketHolder
from protocol.errors import SocketUnavailable
from protocol.listen import parse_listen
from protocol.sockets import unix_live


@pytest.fixture
def busy(tmp_path: Path) -> Iterator[Path]:
    """A listener that never accepts, its queue full: a further connect would wait."""
    path = tmp_path / "busy.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(0)
    queued: list[socket.socket] = []
    try:
        while True:
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
            queued.append(c)
            try:
                c.connect(str(path))
            except BlockingIOError:
                break   # full
            assert len(queued) < 64, "the queue never filled"
        yield path
    finally:
        for c in queued:
            c.close()
        server.close()


def _within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()`` in a thread, failing the test (not hanging it) if it does not return."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:   # handed to the test
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "it waited on the busy listener"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_busy_listener_is_live_at_once(busy: Path) -> None:
    assert _within(5, lambda: unix_live(str(busy))) is True


def test_a_listening_socket_is_live_and_a_leftover_file_is_not(tmp_path: Path) -> None:
    path = tmp_path / "a.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(8)
    assert unix_live(str(path)) is True
    s.close()   # the file stays: nobody listens
    assert unix_live(str(path)) is False
    with pytest.raises(FileNotFoundError):
        unix_live(str(tmp_path / "none.sock"))


def test_the_plan_check_refuses_a_busy_listener_at_once(busy: Path) -> None:
    from backend import activation
    said: list[str] = []

    def fail(path: Any, problem: str) -> None:
        said.append(problem)
        raise ValueError(problem)
    with pytest.raises(ValueError):
        _within(5, lambda: activation._check_unix(parse_listen(f"unix:{busy}"), ("k",),
                                                  fail, owner_uid=os.geteuid()))
    assert said == [f"a live socket answers at {busy}"]


def test_the_owner_refuses_to_bind_over_a_busy_listener_at_once(busy: Path) -> None:
    holder = SocketHolder()
    decl = SocketDecl.from_wire({"name": "web", "listen": f"unix:{busy}"})
    with pytest.raises(SocketUnavailable, match="a live socket answers"):
        _within(5, lambda: holder.ensure("s", "a", decl))
    assert busy.is_socket()   # left to its listener
