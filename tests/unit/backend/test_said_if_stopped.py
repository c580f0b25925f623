"""A command waiting on a stopped daemon says so once on stderr, terminal or not: `tenure
backend upgrade` against a guardian stopped mid-call waited silently up to ten minutes."""

from __future__ import annotations

import io
import signal
import subprocess
import time

import pytest

from backend.cli import progress


@pytest.fixture
def stopped_process():
    proc = subprocess.Popen(["sleep", "60"])
    proc.send_signal(signal.SIGSTOP)
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_stopped_daemon_is_said_once(stopped_process: int,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "STOPPED_SAY_S", 0.5)
    out = io.StringIO()
    with progress.said_if_stopped("guardian", lambda: stopped_process, out):
        deadline = time.monotonic() + 10
        while not out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(2.5)   # and only once
    pid = stopped_process
    assert out.getvalue() == (
        f"tenure: the guardian does not answer: pid {pid} is stopped (SIGSTOP or a "
        f"debugger); kill -CONT {pid} continues it; waiting for its answer (Ctrl-C stops "
        "waiting; what was asked goes on once it is continued)\n")


def test_a_running_or_unknown_daemon_is_not_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "STOPPED_SAY_S", 0.0)
    proc = subprocess.Popen(["sleep", "60"])
    try:
        for pid_of in (lambda: proc.pid, lambda: None):
            out = io.StringIO()
            with progress.said_if_stopped("guardian", pid_of, out):
                time.sleep(1.5)
            assert out.getvalue() == ""
    finally:
        proc.kill()
        proc.wait()
