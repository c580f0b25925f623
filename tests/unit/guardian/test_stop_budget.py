"""A guardian that stops (SIGTERM: `systemctl stop` or `restart tenure`) asks its backend
for a last certificate within the deadline it gives, not 5 s per call: the whole stop,
a SIGKILL's wait included, must fit in the unit's TimeoutStopSec (30 s), or systemd
kills the guardian and its backend mid-stop."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from guardian import daemon
from protocol.errors import RequestTimedOut


def test_a_last_certificate_is_asked_for_within_its_deadline(monkeypatch) -> None:
    asked: list[float] = []

    async def silent(sock: str, method: str, params: Any = None, *, timeout: float,
                     pid: int | None = None) -> Any:
        asked.append(timeout)
        if len(asked) == 1:
            return {"published": False}      # not quiet yet: asked again
        await asyncio.sleep(timeout)         # then it does not answer
        raise RequestTimedOut(f"{method}: no answer in {timeout} s")
    monkeypatch.setattr(daemon, "control", silent)
    co = SimpleNamespace(paths=SimpleNamespace(api_sock="/nonexistent"), current=None)
    with pytest.raises(RequestTimedOut):
        asyncio.run(daemon._certify(co, deadline=0.5))  # type: ignore[arg-type]
    assert asked[0] <= 0.5 and asked[1] <= 0.5 - 0.2 + 0.05, asked


def test_a_guardian_waiting_for_the_owner_says_so_to_systemd(monkeypatch, tmp_path) -> None:
    """Its unit no longer pulls the owner in (a restart in a maintenance window would
    start it): a guardian started without one says in `systemctl status` what it waits
    for, then, ready, that it serves."""
    import socket

    from protocol.errors import ConnectFailed
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setattr(daemon, "connect_delays", lambda: iter([0.01, 0.01]))
    tries: list[int] = []

    async def connect_owner() -> None:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectFailed("owner.sock: connection refused")
    co = SimpleNamespace(connect_owner=connect_owner)

    async def main() -> bool:
        return await daemon._connect_owner(co, asyncio.Event())  # type: ignore[arg-type]
    monkeypatch.setattr(daemon, "SAY_WAITING_S", 0.01)
    try:
        assert asyncio.run(main()) is True
        sock.settimeout(1.0)
        said = sock.recv(4096).decode()
    finally:
        sock.close()
    assert said == "STATUS=waiting for the owner (not ready until it answers): " \
        "owner.sock: connection refused"
