"""A real owner gives back the memory of a log backlog once it is written. Was: an
owner whose journal fell behind a flood of output stayed at its peak (measured: 165 MiB
resident with ~140 MiB queued, for good): the writer held its last batch (up to 64 MiB)
while idle, and glibc kept the freed heap. Writes are held here (a preload) so that the
backlog forms whatever the disk's speed."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from owner.testing import GuardianKey, OwnerProcess

HOLD_WRITES = """
import os, time
from owner import journaltables
_insert = journaltables.Tables._insert
def _held(self, conn, item):
    while os.path.exists(os.path.join(os.environ["TENURE_TEST_HOME"], "hold-writes")):
        time.sleep(0.01)
    return _insert(self, conn, item)
journaltables.Tables._insert = _held
"""
MIB = 1 << 20
FLOOD = 64   # MiB written by the app, in lines of 16 KiB (the journal's record size)


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


@pytest.fixture
def held_owner(short_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[OwnerProcess]:
    monkeypatch.setenv("TENURE_TEST_HOME", str(short_home))
    owner = OwnerProcess(short_home, preload=HOLD_WRITES).start()
    try:
        yield owner
    finally:
        (short_home / "hold-writes").unlink(missing_ok=True)
        owner.stop()


def test_a_drained_backlog_gives_its_memory_back(held_owner, short_home) -> None:
    owner = held_owner
    assert owner.proc is not None
    pid = owner.proc.pid
    (short_home / "hold-writes").touch()
    code = (f"import sys, time\nfor _ in range({FLOOD}): sys.stdout.write('x' * {MIB})\n"
            "sys.stdout.flush()\ntime.sleep(1000)")
    with owner.client() as c:
        epoch = GuardianKey().bootstrap(c, owner.instance)
        c.call("launch", {"launch_key": "flood", "stack": "s", "app": "a", "instance": 0,
                          "generation": 1, "argv": [sys.executable, "-c", code],
                          "env": {"PATH": os.environ["PATH"]},
                          "stop": {"signal": "TERM", "timeout": 5, "kill_after": 5}},
               epoch=epoch)
        deadline = time.monotonic() + 60
        while _kib(pid, "RssAnon") < (FLOOD - 8) * 1024:   # read, and queued
            assert time.monotonic() < deadline, f"RssAnon {_kib(pid, 'RssAnon')} KiB"
            time.sleep(0.05)
        (short_home / "hold-writes").unlink()
        deadline = time.monotonic() + 60
        while c.call("status")["log_last_id"] < FLOOD * 64:
            assert time.monotonic() < deadline, "the backlog was not written"
            time.sleep(0.05)
        deadline = time.monotonic() + 30
        while _kib(pid, "RssAnon") > 40 * 1024:
            assert time.monotonic() < deadline, \
                f"RssAnon stays at {_kib(pid, 'RssAnon')} KiB after the backlog drained"
            time.sleep(0.05)
        c.call("stop", {"launch_key": "flood"}, epoch=epoch)
    assert owner.stderr_path is not None
    path = owner.stderr_path

    def told() -> list[str]:
        return [ln for ln in path.read_text().splitlines() if "log backlog" in ln]
    # the memory goes back inside malloc_trim, the line that says so is logged after it
    deadline = time.monotonic() + 10
    while not told():
        assert time.monotonic() < deadline, "no line said the memory was given back"
        time.sleep(0.05)
    assert len(told()) == 1 and "MiB of freed memory returned to the system" in told()[0], \
        told()
