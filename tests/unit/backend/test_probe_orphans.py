"""What an exec probe leaves when its backend is SIGKILLed is found by its marker and
ended, and nothing else is: not a probe of a backend that still runs (in a hot handoff
the old generation ends its own), not a process without the marker, not another home's.
Real ``sleep`` processes started here with the marker set, all ended by pid."""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backend import probe_orphans
from backend.probe_exec import run_check
from backend.probe_orphans import PROBE_ENV, end_orphaned_probes, parse, probe_env, sweep
from backend.testing import Cluster, run_bounded
from protocol.identity import Identity, new_identity
from protocol.layout import home_id
from protocol.procfs import environ, start_ticks

GUARD = 30.0   # reached only when broken; never a timing assert
ENV = {"PATH": "/usr/bin:/bin"}


@pytest.fixture
def homes() -> Iterator[tuple[str, str]]:
    """Two homes: ours and another."""
    with tempfile.TemporaryDirectory(prefix="tn") as a, \
            tempfile.TemporaryDirectory(prefix="tn") as b:
        yield a, b


@pytest.fixture(autouse=True)
def unmarked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with this process not marked, and leaves it so."""
    monkeypatch.setattr(probe_orphans, "_value", None)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The processes a test starts: all killed and reaped at its end."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for p in started:
            p.kill()
            p.wait()


def _dead_backend() -> tuple[int, int]:
    """(pid, start ticks) of a process that ran and is gone (reaped)."""
    p = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    ticks = start_ticks(p.pid)
    p.kill()
    p.wait()
    assert ticks is not None
    return p.pid, ticks


def _start(procs: list[subprocess.Popen[bytes]], marker: str | None) -> int:
    return _start_with(procs, dict(ENV) if marker is None else {**ENV, PROBE_ENV: marker})


def _start_with(procs: list[subprocess.Popen[bytes]], env: dict[str, str]) -> int:
    p = subprocess.Popen(["sleep", "600"], env=env, stdin=subprocess.DEVNULL)
    procs.append(p)
    # Popen returns once the exec began; the new image's environment shows in /proc a
    # moment later (until then it reads empty, and the sweep would not see the marker)
    deadline = time.monotonic() + GUARD
    while not environ(p.pid) and time.monotonic() < deadline:
        os.sched_yield()
    return p.pid


def _me() -> tuple[int, int]:
    ticks = start_ticks(os.getpid())
    assert ticks is not None
    return os.getpid(), ticks


def test_only_probes_of_this_homes_dead_backends_are_ended(homes, procs) -> None:
    ours, other = (home_id(h) for h in homes)
    dead_pid, dead_ticks = _dead_backend()
    me, my_ticks = _me()
    orphan = _start(procs, f"{ours}:{dead_pid}:{dead_ticks}")
    reused = _start(procs, f"{ours}:{me}:{my_ticks + 1}")   # its pid runs another process
    live = _start(procs, f"{ours}:{me}:{my_ticks}")         # its backend runs: ours
    plain = _start(procs, None)
    elsewhere = _start(procs, f"{other}:{dead_pid}:{dead_ticks}")
    malformed = _start(procs, f"{ours}:{dead_pid}")
    assert sorted(sweep(homes[0])) == sorted([orphan, reused])
    for p in procs:
        if p.pid in (orphan, reused):
            assert p.wait(GUARD) == -9
    assert all(p.poll() is None for p in procs if p.pid in
               (live, plain, elsewhere, malformed))
    assert sweep(homes[0]) == []


# an app's env past what the sweep reads of /proc/PID/environ (1 MiB): nine 120 kB
# entries, and a tenth sized so that the read would end inside what follows them
BIG = {**ENV, **{f"P{i}": "x" * 120_000 for i in range(9)}, "Q": "y" * 39_000}


def test_a_probe_with_a_large_environment_is_judged_by_its_whole_marker(homes, procs
                                                                        ) -> None:
    """Was: the marker, placed last, lay past the read (a dead backend's probe was never
    found) or was cut inside its start ticks (a live backend's probe was ended)."""
    me = new_identity()
    probe_orphans.mark(homes[0], me)
    live = _start_with(procs, probe_env(BIG) or {})
    dead_pid, dead_ticks = _dead_backend()
    probe_orphans.mark(homes[0], Identity(me.instance, dead_pid, dead_ticks, me.boot_id))
    orphan = _start_with(procs, probe_env(BIG) or {})
    assert sweep(homes[0]) == [orphan]
    assert all(p.poll() is None for p in procs if p.pid == live)


def test_an_environment_entry_cut_by_the_read_is_left_out(procs) -> None:
    seen = environ(_start_with(procs, BIG)) or []
    whole = {f"{k}={v}".encode() for k, v in BIG.items()}
    assert seen and all(v in whole for v in seen)   # the last one read is cut: left out
    assert len(seen) < len(BIG)


def test_a_home_that_cannot_be_identified_ends_nothing(procs) -> None:
    dead_pid, dead_ticks = _dead_backend()
    _start(procs, f":{dead_pid}:{dead_ticks}")
    assert sweep("/nonexistent/home") == []
    assert all(p.poll() is None for p in procs)


def test_a_marked_backend_marks_its_probes_and_what_they_start(homes) -> None:
    me = new_identity()
    assert probe_orphans.mark(homes[0], me) == f"{home_id(homes[0])}:{me.pid}:" \
        f"{me.start_ticks}"
    # the app's env cannot replace it; the probe's children inherit it
    code, line = run_bounded(lambda: run_check(
        ["sh", "-c", f'sh -c "echo \\${PROBE_ENV}"'], GUARD,
        env={**ENV, PROBE_ENV: "forged"}), GUARD)
    assert (code, line) == (0, f"{home_id(homes[0])}:{me.pid}:{me.start_ticks}")


def test_an_unmarked_process_gives_its_probes_the_env_as_given() -> None:
    assert probe_env(None) is None
    assert probe_env(ENV) == ENV and probe_env(ENV) is not ENV
    probe_orphans.mark("/", new_identity())
    assert probe_env(None) == {**os.environ, PROBE_ENV: probe_orphans._value}


def test_an_unidentifiable_home_leaves_probes_unmarked(caplog) -> None:
    with caplog.at_level(logging.WARNING, "tenure.backend"):
        assert probe_orphans.mark("/nonexistent/home", new_identity()) is None
    assert probe_env(ENV) == ENV
    assert "the home cannot be identified" in caplog.text


def test_a_generation_start_marks_and_sweeps_once_logged(homes, procs, caplog) -> None:
    dead_pid, dead_ticks = _dead_backend()
    orphan = _start(procs, f"{home_id(homes[0])}:{dead_pid}:{dead_ticks}")

    async def main() -> None:
        await end_orphaned_probes(homes[0], new_identity())
    with caplog.at_level(logging.INFO, "tenure.backend"):
        run_bounded(main, GUARD)
    assert procs[0].wait(GUARD) == -9
    assert f"exec probes: ended 1 process(es) left by probes of a dead backend " \
        f"(pids {orphan})" in caplog.text
    assert probe_env({}) == {PROBE_ENV: probe_orphans._value}


def test_a_failed_sweep_is_logged_not_raised(homes, monkeypatch, caplog) -> None:
    def broken(home: str) -> list[int]:
        raise PermissionError("no /proc")
    monkeypatch.setattr(probe_orphans, "sweep", broken)

    async def main() -> None:
        await end_orphaned_probes(homes[0], new_identity())
    with caplog.at_level(logging.WARNING, "tenure.backend"):
        run_bounded(main, GUARD)
    assert "the sweep for probes of dead backends failed: PermissionError" in caplog.text


def test_the_leak_check_finds_a_probe_of_a_test_home(homes, procs) -> None:
    """A probe's environment names its home by identity alone: Cluster.leftovers, which
    the cluster fixture runs after every test, finds it by its marker."""
    pid = _start(procs, f"{home_id(homes[0])}:1:2")
    assert pid in Cluster(Path(homes[0])).leftovers()
    assert pid not in Cluster(Path(homes[1])).leftovers()


@given(st.integers(0, 2**64), st.integers(0, 2**64), st.integers(1, 2**22),
       st.integers(0, 2**64))
def test_parse_reads_what_mark_writes(dev: int, ino: int, pid: int, ticks: int) -> None:
    assert parse(f"{dev}:{ino}:{pid}:{ticks}".encode()) == (f"{dev}:{ino}", pid, ticks)


@given(st.binary(max_size=64))
def test_parse_never_raises(value: bytes) -> None:
    m = parse(value)
    assert m is None or (m[0] and isinstance(m[1], int) and isinstance(m[2], int))


@pytest.mark.parametrize("value", [b"", b"1:2", b":1:2", b"1:2:x:3", b"1:2:3:", b"1:2:-3:4"])
def test_parse_refuses_malformed_values(value: bytes) -> None:
    assert parse(value) is None
