"""The start ticks a spawn reports are the ones /proc shows for the process, whether they
came from the clock readings around the fork or from /proc itself (real processes)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from owner import spawn as spawn_mod
from owner.runas import RunAs
from owner.spawn import PopenSpawner, Spawned
from owner.specs import LaunchSpec
from protocol import procfs


@pytest.fixture
def spawned() -> Iterator[list[Spawned]]:
    out: list[Spawned] = []
    try:
        yield out
    finally:
        for sp in out:
            os.kill(sp.pid, signal.SIGKILL)
            os.waitpid(sp.pid, 0)
            for fd in (sp.pidfd, sp.stdout_fd, sp.stderr_fd):
                if fd is not None:
                    os.close(fd)


FAST_WANTED = 10


def spawn_some(n: int, into: list[Spawned], **spec: Any) -> None:
    for _ in range(n):
        into.append(PopenSpawner().spawn(
            LaunchSpec(argv=("sleep", "1000"), env={"PATH": "/usr/bin:/bin"}, **spec), None))


def test_ticks_from_the_clock_are_the_ones_proc_shows(spawned, monkeypatch):
    fast: list[int] = []

    def counted(before: int, after: int) -> int | None:
        got = procfs.ticks_between(before, after)
        if got is not None:
            fast.append(got)
        return got
    monkeypatch.setattr(spawn_mod, "ticks_between", counted)
    spawn_some(20, spawned, run_as=RunAs(umask=0o027))    # a child setup's fork path
    # a tick is 10 ms and a spawn well under 1 ms on a quiet machine, but a loaded one
    # can stretch a spawn across ticks: spawn until a few never read /proc (bounded)
    for _ in range(10):
        spawn_some(20, spawned)
        if len(fast) >= FAST_WANTED:
            break
    assert [sp.start_ticks for sp in spawned] == \
        [procfs.start_ticks(sp.pid) for sp in spawned]
    assert len(fast) >= FAST_WANTED, (len(fast), len(spawned))


def test_readings_that_straddle_a_tick_fall_back_to_proc(spawned, monkeypatch):
    monkeypatch.setattr(spawn_mod, "ticks_between", lambda before, after: None)
    spawn_some(5, spawned)
    assert all(sp.start_ticks == procfs.start_ticks(sp.pid) and sp.start_ticks > 0
               for sp in spawned)
