"""Regression: a guardian that hangs at boot, holding runtime/guardian.lock but never
listening (a release whose guardian hangs before its socket), was invisible: `guardian
status` and `backend status` said "the guardian is not running; `tenure up`
starts it" while its pid lived, `tenure up` failed with "another guardian runs" without
the pid, and `tenure down` reported success and left it running. It is found by its
lock now: named with its pid and what /proc shows, and stopped by `down`."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import HandGuardian, stop_cluster_guardian

from protocol.procfs import running, start_ticks

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n'


def _hung_guardian(cluster) -> HandGuardian:
    """The cluster's guardian stopped, a guardian that hangs holding the lock instead."""
    cluster.up(ONE)
    cluster.wait_ready(1)
    stop_cluster_guardian(cluster)
    hung = HandGuardian(cluster, fault="start.locked:hang-guardian", tag="hung")
    deadline = time.monotonic() + 60
    while b"hang-guardian at start.locked" not in hung.err_path.read_bytes():
        assert hung.proc.poll() is None, hung.err_path.read_text()
        assert time.monotonic() < deadline, hung.err_path.read_text()
        time.sleep(0.05)
    return hung


def test_a_guardian_hung_at_boot_is_named_by_its_pid_and_stopped_by_down(cluster) -> None:
    hung = _hung_guardian(cluster)
    pid = hung.pid
    try:
        for args in (("guardian", "status"), ("backend", "status")):
            res = cluster.cli(*args, timeout=60)
            err = res.out["error"]
            assert res.code == 3 and err["code"] == "CONNECT_FAILED", (args, res)
            assert err["data"]["pid"] == pid, (args, err)
            assert f"the guardian (pid {pid}) holds" in err["msg"], (args, err)
            assert "does not answer" in err["msg"] and "not running" not in err["msg"], err
            assert f"pid {pid} runs (state" in err["msg"], err     # what /proc says
        st = cluster.cli("status")            # its backend retired with the old guardian
        assert st.code == 3 and st.out["guardian_hung"]["pid"] == pid, st
        text = cluster.cli_text("status", expect=3)   # was: its stale diagnostics
        assert text.startswith(f"backend: not available; the guardian (pid {pid}) holds "
                               ), text
        up = cluster.cli("up", "--timeout", "20", timeout=120)
        assert up.code != 0 and f"pid {pid}" in up.out["error"]["msg"], up
        ticks = start_ticks(pid)
        down = cluster.cli("down", timeout=180)
        assert down.code == 0, down
        assert down.out["guardian"] is True and down.out["owner"] is True, down
        hung.wait_killed(10)
        assert ticks is not None and not running(pid, ticks)
    finally:
        hung.stop()


def test_down_never_reports_success_while_a_stopped_hung_guardian_runs(cluster) -> None:
    import os
    import signal
    hung = _hung_guardian(cluster)
    os.kill(hung.pid, signal.SIGSTOP)
    try:
        down = cluster.cli("down", timeout=180)
        assert down.code == 1 and down.out["guardian"] is False, down
        assert f"kill -CONT {hung.pid}" in down.out["guardian_problem"], down
        assert down.out["owner"] is False, down      # nothing below a living guardian
    finally:
        os.kill(hung.pid, signal.SIGCONT)
        hung.wait_killed(30)      # the pending SIGTERM takes effect
        hung.stop()


def test_status_says_when_the_guardian_is_stopped_or_not_running(cluster) -> None:
    """With the guardian stopped, status looked normal though a backend crash would not
    be recovered; with the guardian gone (SIGTERM alone, which retires its backend) it
    said only 'last activation … is complete'."""
    import os
    import signal
    cluster.up('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n')
    cluster.wait_ready(1)
    with cluster.guardian() as g:
        pid = int(g.call("status")["guardian"]["pid"])
    os.kill(pid, signal.SIGSTOP)
    try:
        st = cluster.cli("status")
        assert st.out["guardian"]["pid"] == pid and not st.out["guardian"]["gone"], st.out
        text = cluster.cli_text("status")
        assert f"guardian: NOT ANSWERING: pid {pid} is stopped (SIGSTOP or a debugger); " \
               f"kill -CONT {pid} continues it; a backend crash would not be recovered" \
               in text, text
    finally:
        os.kill(pid, signal.SIGCONT)
    assert cluster.cli("status").out["guardian"] is None
    os.kill(pid, signal.SIGTERM)
    cluster.wait(lambda: not running(pid, start_ticks(pid) or 0), 30, "the guardian gone")
    cluster.wait(lambda: cluster.cli("status").code == 3, 30, "its backend retired")
    text = cluster.cli_text("status", expect=3)
    assert text.startswith("backend: not available; the guardian is not running, so none "
                           "is started: `tenure up` starts it (applications keep running)"), text
    cluster.up()
