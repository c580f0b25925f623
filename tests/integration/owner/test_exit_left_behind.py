"""The exit event names how many tracked descendants outlived the launch's leader (the
backend stops them); an exit that left nothing says nothing more than it used to."""

from __future__ import annotations

import os
import signal
import sys

from owner.testing import GuardianKey, OwnerProcess
from protocol.procfs import running, start_ticks

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_owner import Live


def test_an_exit_names_what_outlived_its_leader(owner: OwnerProcess) -> None:
    lv = Live(owner, GuardianKey())
    pid, ticks = 0, None
    try:
        pidfile = owner.paths.dir / "child.pid"
        lv.launch(["sh", "-c", f"sleep 1001 & echo $! > {pidfile}; exit 0"])
        lv.launch(["true"])
        left = lv.wait_event(lambda e: e["kind"] == "exit" and e["launch_key"] == "k1")
        alone = lv.wait_event(lambda e: e["kind"] == "exit" and e["launch_key"] == "k2")
        pid = int(pidfile.read_text())
        ticks = start_ticks(pid)
        assert ticks is not None and left["descendants"] == 1, left
        assert "descendants" not in alone, alone
        lv.call("stop", {"launch_key": "k1"})          # a stop of the key ends it
        assert not running(pid, ticks)
    finally:
        if ticks is not None and running(pid, ticks):
            os.kill(pid, signal.SIGKILL)
        lv.c.close()
