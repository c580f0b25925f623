"""The background start of `tenure up --no-wait` (backend.cli.daemons.in_background):
the command returns at once; the child's work runs detached, and an error of its own
ends in logs/up.log with its traceback and exit status 1, never silently."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from backend import spool
from backend.cli import daemons
from backend.cli.daemons import in_background
from protocol.errors import StorageFailed
from protocol.layout import Layout


def _wait(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_the_work_runs_in_a_child_of_its_own_session(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    marker = tmp_path / "ran"

    def work() -> None:
        marker.write_text(f"{os.getpid()} {os.getsid(0)}")
    pid = in_background(layout, work)
    assert pid != os.getpid() and _wait(pid) == 0
    child, session = map(int, marker.read_text().split())
    assert child == pid and session == pid
    log = layout.logs / "up.log"
    assert log.read_text().endswith(" tenure up --no-wait: the daemons answer\n")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    last = daemons.last_background_start(layout)
    assert last is not None and last["ok"] and last["at"] in log.read_text()


def test_an_error_in_the_child_is_logged_with_its_traceback(tmp_path: Path) -> None:
    layout = Layout(tmp_path)

    def work() -> None:
        raise RuntimeError("the release would not verify")
    assert _wait(in_background(layout, work)) == 1
    text = (layout.logs / "up.log").read_text()
    assert "tenure up --no-wait: starting the daemons failed" in text
    assert "RuntimeError: the release would not verify" in text and "Traceback" in text
    last = daemons.last_background_start(layout)
    assert last is not None and not last["ok"]
    assert last["error"] == "RuntimeError: the release would not verify"


def test_the_last_record_of_up_log_is_the_one_reported(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert daemons.last_background_start(layout) is None          # no log
    layout.logs.mkdir(mode=0o700)
    log = layout.logs / "up.log"
    log.write_text("noise without a record\n")
    os.chmod(log, 0o600)
    assert daemons.last_background_start(layout) is None
    log.write_text("2026-01-01T10:00:00 tenure up --no-wait: starting the daemons failed\n"
                   "Traceback ...\nConnectFailed: owner did not come up\n"
                   "2026-01-01T10:05:00 tenure up --no-wait: the daemons answer\n")
    assert daemons.last_background_start(layout) == {"at": "2026-01-01T10:05:00",
                                                     "ok": True}
    os.chmod(log, 0o666)                                          # not ours alone: unread
    assert daemons.last_background_start(layout) is None


def _stopped_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Layout:
    """A home whose guardian has a release selected and where nothing answers."""
    monkeypatch.setattr(daemons, "_selected", lambda layout: True)
    monkeypatch.setattr(daemons, "ping", lambda sock, **kw: None)
    return Layout(tmp_path)


def test_a_config_that_cannot_be_queued_starts_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _stopped_home(tmp_path, monkeypatch)
    started: list[str] = []
    monkeypatch.setattr(daemons, "in_background", lambda *a: started.append("bg"))

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(spool, "atomic_write_json", full)
    with pytest.raises(StorageFailed, match="No space left on device; nothing was started"):
        daemons.start_queued(layout, "[stacks]\n", "/etc/tenure.toml")
    assert started == [] and not Path(layout.queued_config).exists()


def test_a_background_start_that_cannot_fork_says_the_config_stays_queued(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _stopped_home(tmp_path, monkeypatch)

    def no_fork() -> int:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
    monkeypatch.setattr(os, "fork", no_fork)
    with pytest.raises(StorageFailed, match="config stays queued"):
        daemons.start_queued(layout, "[stacks]\n", "/etc/tenure.toml")
    assert Path(layout.queued_config).exists()


def test_down_and_up_wait_while_the_child_starts_the_daemons(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert daemons.wait_background_start(layout, timeout=0)   # none ever ran
    go_r, go_w = os.pipe()

    def work() -> None:
        os.read(go_r, 1)            # "spawning": until the test lets it finish
    pid = in_background(layout, work)
    try:
        assert not daemons.wait_background_start(layout, timeout=0.05)
    finally:
        os.write(go_w, b"x")
        os.close(go_w)
        os.close(go_r)
    assert daemons.wait_background_start(layout, timeout=30)
    assert _wait(pid) == 0
