"""Shared fixtures: short temporary homes and leak checks for every non-unit test."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import settings

# No per-example deadline: a timed assertion in a property test fails on a busy machine
# (the first examples also pay for imports), and speed is the benchmarks' business.
settings.register_profile("tenure", deadline=None)
settings.load_profile("tenure")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``root`` are skipped, with the reason printed, unless we are root."""
    if item.get_closest_marker("root") is not None and os.geteuid() != 0:
        reason = "needs root (starts apps as other users, creates users and groups)"
        print(f"SKIP {item.nodeid}: {reason}")
        pytest.skip(reason)


@pytest.fixture
def short_home() -> Iterator[Path]:
    """A private 0700 directory with a short path (Unix socket paths are limited)."""
    path = Path(tempfile.mkdtemp(prefix="tn", dir="/tmp"))
    os.chmod(path, 0o700)
    try:
        yield path
    finally:
        from backend.testing import force_rmtree
        force_rmtree(path)


def _open_fds() -> set[str]:
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds.add(f"{fd}->{os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            pass  # the fd of the listdir itself
    return fds


def _children() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


@pytest.fixture(autouse=True)
def leak_check(request: pytest.FixtureRequest) -> Iterator[None]:
    """Integration, fault and system tests must leave no child process and no new fd."""
    tier = Path(str(request.node.fspath)).parent
    if "unit" in tier.parts:
        yield
        return
    before = _open_fds()
    yield
    deadline = time.monotonic() + 5.0
    while (kids := _children()) and time.monotonic() < deadline:
        for k in kids:
            try:
                os.waitpid(k.pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.02)
    leaked = [f"{k.pid} {k.name()}" for k in kids if k.is_running()]
    if leaked:
        for k in kids:
            k.kill()  # only our own descendants, so later tests stay clean
        pytest.fail(f"test left child processes behind: {leaked}")
    extra = {fd for fd in _open_fds() - before if "pipe:" in fd or "socket:" in fd
             or "/tmp/" in fd}
    if extra:
        pytest.fail(f"test leaked file descriptors: {sorted(extra)}")


@pytest.fixture(scope="session")
def sealed_release() -> Iterator[Path]:
    """One sealed release of the installed tenure for every cluster of the session."""
    from backend.testing import seal_once
    d = Path(tempfile.mkdtemp(prefix="tsr", dir="/tmp"))
    try:
        yield seal_once(d)
    finally:
        from backend.testing import force_rmtree
        force_rmtree(d)


@pytest.fixture
def cluster(short_home: Path, sealed_release: Path) -> Iterator[Any]:
    """A tenure home with owner, guardian and backend started by the test (`c.up()`);
    at teardown everything is stopped and nothing of this home may be left running."""
    from backend.testing import Cluster
    c = Cluster(short_home, sealed_release)
    try:
        yield c
    finally:
        c.down()
        left = c.leftovers()
        deadline = time.monotonic() + 10
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = c.leftovers()
        described = [_describe(pid) for pid in left]
        for pid in left:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        assert not left, f"processes of {short_home} left running: {described}"


def _describe(pid: int) -> str:
    """``pid (parent ppid): command line`` of a leftover, for the failure message."""
    try:
        p = psutil.Process(pid)
        return f"{pid} (parent {p.ppid()}): {' '.join(p.cmdline())[:300]}"
    except psutil.Error:
        return f"{pid} (gone)"


@pytest.fixture
def sqlite_file() -> Any:
    """``make(path, *statements)``: a private (0600) SQLite file holding what the
    statements make, as a damaged or foreign state file would."""
    import sqlite3

    def make(path: Path, *statements: str) -> None:
        conn = sqlite3.connect(path)
        for s in statements:
            conn.execute(s)
        conn.commit()
        conn.close()
        os.chmod(path, 0o600)
    return make
