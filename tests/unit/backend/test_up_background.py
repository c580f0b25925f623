"""The background start of `tenure up --no-wait` (backend.cli.daemons.in_background):
the command returns at once; the child's work runs detached, and an error of its own
ends in logs/up.log with its traceback and exit status 1, never silently."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from backend.cli.daemons import in_background
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
    assert log.read_text() == "" and stat.S_IMODE(log.stat().st_mode) == 0o600


def test_an_error_in_the_child_is_logged_with_its_traceback(tmp_path: Path) -> None:
    layout = Layout(tmp_path)

    def work() -> None:
        raise RuntimeError("the release would not verify")
    assert _wait(in_background(layout, work)) == 1
    text = (layout.logs / "up.log").read_text()
    assert "tenure up --no-wait: starting the daemons failed" in text
    assert "RuntimeError: the release would not verify" in text and "Traceback" in text
