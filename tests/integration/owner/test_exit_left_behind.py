"""The exit event names how many tracked descendants outlived the launch's leader (the
backend stops them); an exit that left nothing says nothing more than it used to."""

from __future__ import annotations

import os
import signal
import sys
import time

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


SLOW_TO_GO = ("import signal, sys, time; "
              "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.5), sys.exit(0))); "
              "time.sleep(1000)")


def test_an_exit_during_a_stop_names_nothing_left_running(owner: OwnerProcess) -> None:
    """A shell's child in its group, ending half a second after the stop's SIGTERM,
    still ran at the shell's exit: the event said it was left running (`1 process(es)
    it left running are stopped` on nearly every stop of a shell-wrapped app), though
    the stop under way ends it with its leader."""
    lv = Live(owner, GuardianKey())
    pid, ticks = 0, None
    try:
        pidfile = owner.paths.dir / "child.pid"
        lv.launch(["sh", "-c", f"python3 -c '{SLOW_TO_GO}' & echo $! > {pidfile}; wait"])
        deadline = time.monotonic() + 10
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline, "the child did not start"
            time.sleep(0.02)
        pid = int(pidfile.read_text())
        ticks = start_ticks(pid)
        time.sleep(0.3)   # the child's handler is set
        done = lv.call("stop", {"launch_key": "k1"})
        assert done["outcome"] == "stopped" and not done["escalated"], done
        assert not running(pid, ticks)
        ended = lv.wait_event(lambda e: e["kind"] == "exit" and e["launch_key"] == "k1")
        assert ended["stopped"] is True and "descendants" not in ended, ended
    finally:
        if ticks is not None and running(pid, ticks):
            os.kill(pid, signal.SIGKILL)
        lv.c.close()
