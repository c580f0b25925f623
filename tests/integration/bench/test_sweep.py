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
