"""A home deleted (and made again at the same path) while tenure runs: every daemon ends
by itself, the owner stops its applications first, nothing is written into the new
directory, and a new owner on the path is refused until the old one is gone. Before,
the old daemons ran on unreachable, and `tenure up` on the path launched every
application a second time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from backend.testing import force_rmtree
from protocol.procfs import running, start_ticks

SLEEPERS = """
[stacks.s.apps.a]
command = ["sleep", "100000"]
[stacks.s.apps.b]
command = ["sleep", "100000"]
"""

# ignores SIGTERM: the owner waits its stop timeout, then kills it
STUBBORN = """
[stacks.s.apps.stubborn]
command = ["sh", "-c", "trap '' TERM; while :; do sleep 0.2; done"]
stop = { timeout = 6 }
"""


def _started(cluster, config: str, ready: int) -> tuple[dict[str, tuple[int, int]], str]:
    """Up with ``config`` until ``ready`` apps are: its processes and the activation."""
    cluster.up(config)
    cluster.wait_ready(ready)
    return _processes(cluster), cluster.status()["backend"]["activation"]


def _processes(cluster) -> dict[str, tuple[int, int]]:
    """name -> (pid, start ticks) of the daemons and the applications."""
    out = {f"app {k}": v for k, v in cluster.pids().items()}
    st = cluster.status()
    out["backend"] = (st["backend"]["pid"], start_ticks(st["backend"]["pid"]))
    for name, pid in zip(("owner", "guardian"), cluster.daemon_pids(), strict=True):
        out[name] = (pid, start_ticks(pid))
    return out


def _alive(procs: dict[str, tuple[int, int]]) -> list[str]:
    return sorted(name for name, (pid, ticks) in procs.items() if running(pid, ticks))


def _wait_gone(procs: dict[str, tuple[int, int]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _alive(procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(procs), f"still running {timeout} s after the home was lost: " \
                              f"{_alive(procs)}"


@contextmanager
def _kept_logs(cluster, *names: str) -> Iterator[dict[str, int]]:
    """The daemons' log files, held open: they outlive the deleted home."""
    fds = {n: os.open(cluster.layout.logs / f"{n}.log", os.O_RDONLY) for n in names}
    try:
        yield fds
    finally:
        for fd in fds.values():
            os.close(fd)


def _text(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def _make_again(home: Path) -> None:
    force_rmtree(home)
    home.mkdir(mode=0o700)


def test_a_deleted_home_ends_every_daemon_and_stops_its_applications(cluster):
    procs, activation = _started(cluster, SLEEPERS, 2)
    assert len(procs) == 5, procs
    with _kept_logs(cluster, "owner", "guardian", f"backend-{activation}") as logs:
        _make_again(cluster.home)
        _wait_gone(procs, timeout=15)
        owner_log = _text(logs["owner"])
        assert "HOME_LOST: home" in owner_log and "was replaced by another directory" \
            in owner_log, owner_log[-2000:]
        assert "stopping every application and exiting" in owner_log
        assert "HOME_LOST" in _text(logs["guardian"])
    # nothing of the old daemons in the new directory: no receipt, socket or file
    assert list(cluster.home.iterdir()) == []


def test_a_backend_without_its_guardian_ends_by_itself_when_the_home_is_lost(cluster):
    procs, activation = _started(cluster, SLEEPERS, 2)
    guardian = procs["guardian"][0]
    with _kept_logs(cluster, f"backend-{activation}", "guardian") as logs:
        os.kill(guardian, signal.SIGSTOP)   # it cannot end its backend
        try:
            _make_again(cluster.home)
            _wait_gone({"backend": procs["backend"]}, timeout=10)
            assert "HOME_LOST" in _text(logs[f"backend-{activation}"])
        finally:
            os.kill(guardian, signal.SIGCONT)
        _wait_gone(procs, timeout=15)
        assert "HOME_LOST" in _text(logs["guardian"])
    assert list(cluster.home.iterdir()) == []


def test_a_new_owner_is_refused_while_the_old_one_still_stops_its_applications(cluster):
    procs, _ = _started(cluster, STUBBORN, 1)
    old_owner = procs["owner"][0]
    [app] = [v for k, v in procs.items() if k.startswith("app ")]
    with _kept_logs(cluster, "owner") as logs:
        _make_again(cluster.home)
        deadline = time.monotonic() + 10
        while "stopping every application" not in _text(logs["owner"]):
            assert time.monotonic() < deadline, _text(logs["owner"])[-2000:]
            time.sleep(0.05)
        # the old owner waits up to 6 s for its stubborn app meanwhile
        refused = subprocess.run(
            [sys.executable, "-m", "owner", "serve", "--home", str(cluster.home)],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert running(*app), "the app was stopped too early"
    assert refused.returncode == 5, refused.stderr
    assert f"ALREADY_RUNNING: another owner started on {cluster.home} still runs " \
           f"(pid {old_owner})" in refused.stderr, refused.stderr
    _wait_gone(procs, timeout=20)
    cluster.up(STUBBORN)   # once it is gone, the path is free again
    assert set(cluster.wait_ready(1)) == {"s/stubborn/0"}
