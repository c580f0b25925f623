"""An ended launch whose output pipe is still open keeps its row: ``launches.prune``
leaves it, so its key cannot be launched again while the old drainer still reads the
pipe (the owner keeps one drainer per launch key and stream). Here the app hands its
stdout and stderr to a process the owner does not track (this test) and exits."""

from __future__ import annotations

import os
import socket
import sqlite3
import sys
import time
from typing import Any

import pytest

from owner.testing import GuardianKey, OwnerProcess
from protocol.errors import Conflict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_owner import Live

HAND_OVER = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "s.connect(sys.argv[1])\n"
    "socket.send_fds(s, [b'x'], [1, 2])\n"
    "s.close()\n"
)


KEEP = 100   # the fewest ended launches launches.prune keeps
PRUNE = {"keep": KEEP, "protect": []}


def _exited(lv: Live) -> int:
    return sum(e["kind"] == "exit" for e in lv.events())


def _pipes_of_the_launch(server: socket.socket) -> list[int]:
    conn, _ = server.accept()
    with conn:
        conn.settimeout(10)
        _, fds, _, _ = socket.recv_fds(conn, 1, 2)
    assert len(fds) == 2, fds
    return fds


def _wait(pred: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_launch_whose_pipe_is_still_open_is_not_pruned_nor_launched_again(
        owner: OwnerProcess) -> None:
    lv = Live(owner, GuardianKey())
    path = str(owner.paths.dir / "fd.sock")
    fds: list[int] = []
    try:
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(path)
            server.listen(1)
            server.settimeout(10)
            lv.launch([sys.executable, "-c", HAND_OVER, path])
            fds = _pipes_of_the_launch(server)
        lv.wait_event(lambda e: e["kind"] == "exit" and e["launch_key"] == "k1")
        for _ in range(KEEP):                  # newer ended launches, as many as kept
            lv.launch(["true"])
        _wait(lambda: _exited(lv) >= KEEP + 1, "not every launch exited")
        assert lv.call("launches.prune", PRUNE) == {"deleted": 0}

        lv.n = 0   # the same key again: the answer is the launch that ended
        again = lv.launch(["sleep", "30"])
        assert (again["launch_key"], again["state"]) == ("k1", "exited"), again

        for fd in fds:      # the pipes end: the row is an ended launch like any other
            os.close(fd)
        fds = []
        _wait(lambda: lv.call("launches.prune", PRUNE)["deleted"] == 1,
              "the row was not pruned once its pipes ended")

        # the row is gone, but the process table remembers the key's exit: refused,
        # and its new row says so (it stayed 'starting', and the next owner start asked
        # for a reconcile of a launch that never ran)
        lv.n = 0
        with pytest.raises(Conflict, match="already in the process table"):
            lv.launch(["sleep", "30"])
        db = sqlite3.connect(f"file:{owner.paths.db}?mode=ro", uri=True)
        try:
            assert db.execute("SELECT state FROM launches WHERE launch_key = 'k1'"
                              ).fetchall() == [("failed",)]
        finally:
            db.close()
    finally:
        for fd in fds:
            os.close(fd)
        lv.c.close()
