"""The benchmark sweep tells a process on its way out from one left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import psutil
import pytest

from bench.peers import base


def _spawn(token: str, seconds: float) -> subprocess.Popen[bytes]:
    env = dict(os.environ, **{base.TOKEN_VAR: token})
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"],
                            env=env)


@pytest.fixture
def token() -> Iterator[str]:
    value = uuid.uuid4().hex
    yield value
    base.sweep(value)


def test_a_process_exiting_within_the_settle_time_is_not_swept(token: str) -> None:
    proc = _spawn(token, 0.5)
    try:
        assert base.sweep(token, settle=5.0) == []
    finally:
        proc.wait(timeout=10)


def test_a_process_outliving_the_settle_time_is_swept_and_reported(token: str) -> None:
    proc = _spawn(token, 60)
    try:
        assert base.sweep(token, settle=0.3) == [proc.pid]
        assert not psutil.pid_exists(proc.pid)  # killed and reaped by the sweep
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_kill9_times_from_the_signal_not_from_the_check(token: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The restart figure starts at the kill: reading the process's environment to check
    it is ours happens before the returned time is taken."""
    import time
    proc = _spawn(token, 60)
    checked: list[float] = []
    real = base.has_token

    def slow_check(p: psutil.Process, tok: str) -> bool:
        time.sleep(0.05)                     # a check that takes long
        checked.append(time.perf_counter())
        return real(p, tok)
    monkeypatch.setattr(base, "has_token", slow_check)
    try:
        t0 = base.kill9(proc.pid, token)
        assert t0 >= checked[0]
        assert proc.wait(timeout=10) == -9
    finally:
        proc.kill()
        proc.wait(timeout=10)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(RuntimeError, match="not a benchmark process"):
            base.kill9(stranger.pid, token)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait(timeout=10)
