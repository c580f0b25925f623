"""protocol.acceptor: a failing accept() is logged at most once per ``log_every`` by the
clock, with the attempts that failed since, and never with a traceback; accepting
resumes by itself once accept() works again."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from pathlib import Path
from typing import Any

import pytest

from protocol.acceptor import Acceptor


class Failing(socket.socket):
    """A listening socket whose accept() fails with EMFILE while ``failing``."""

    failing = True

    def accept(self) -> tuple[socket.socket, Any]:
        if self.failing:
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


def test_out_of_fds_is_logged_once_per_interval_and_accepting_resumes(
        short_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = str(short_home / "a.sock")
    now = [0.0]

    def clock() -> float:
        now[0] += 10.0   # six failed attempts per minute of log_every
        return now[0]

    async def main() -> tuple[Acceptor, list[socket.socket]]:
        sock = Failing(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        got: list[socket.socket] = []
        acceptor = Acceptor(sock, path, got.append, retry=0.0, clock=clock)
        acceptor.start()
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            client.connect(path)
            async with asyncio.timeout(10):
                while acceptor.failed < 30:
                    await asyncio.sleep(0)
                sock.failing = False
                while not got:
                    await asyncio.sleep(0)
        finally:
            acceptor.close()
            client.close()
        return acceptor, got

    with caplog.at_level(logging.INFO, logger="tenure.rpc"):
        acceptor, got = asyncio.run(main())
    for conn in got:
        conn.close()
    lines = [r for r in caplog.records if r.name == "tenure.rpc"]
    failed = [r for r in lines if "cannot accept" in r.getMessage()]
    assert len(got) == 1 and acceptor.failed >= 30
    assert 5 <= len(failed) <= acceptor.failed // 6 + 1
    assert "Too many open files" in failed[0].getMessage()
    assert "6 attempt(s) failed" in failed[1].getMessage()
    assert all(r.exc_info is None for r in lines)
    assert [r.getMessage() for r in lines if r not in failed] == \
        [f"accepting connections on {path} again"]
