"""Regression: a guardian that started beside a backend generation that was alive but
did not answer (stopped) took it for gone: it recovered from the certificate, and each
of seven attempts fenced the silent generation off under a new epoch and started one
that exited ALREADY_RUNNING (the silent one held api.sock); `tenure up` ended after
~100 s with RECOVERY_BLOCKED, and the silent generation, once continued, found itself
cut off and exited: no backend at all. Now a start waits a while for such a generation
and adopts it once it answers, or blocks at once naming its pid, without fencing it;
the guardian then adopts it by itself once it answers, or recovers once it is gone
(was: only `tenure backend recover` ended that block)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import backend_procs, config

from protocol.procfs import running


def _orphan_a_stopped_backend(cluster) -> tuple[int, int, dict]:
    """Two sleepers up and certified; the backend stopped (SIGSTOP) and its guardian
    killed. Returns the backend's pid, the owner's epoch and the apps' pids."""
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    time.sleep(8)   # a certificate is published (every 5 s, once quiet)
    backend, apps = cluster.backend_pid(), cluster.pids()
    with cluster.guardian() as g:
        me = g.call("status")["guardian"]
    with cluster.owner() as o:
        epoch = o.call("status")["epoch"]
    os.kill(backend, signal.SIGSTOP)
    os.kill(me["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while running(me["pid"], me["start_ticks"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(me["pid"], me["start_ticks"])
    return backend, epoch, apps


def _generations(cluster) -> list[int]:
    """Pids of the backend generations of the home (not standbys, which hold nothing)."""
    return [p.info["pid"] for p in backend_procs(cluster.home)
            if "--standby" not in p.info["cmdline"]]


def _owner_epoch(cluster) -> int:
    with cluster.owner() as o:
        return int(o.call("status")["epoch"])


def test_a_start_beside_a_stopped_backend_adopts_it_once_it_answers(cluster):
    backend, epoch, apps = _orphan_a_stopped_backend(cluster)
    # continued after the start's first question (5 s) went unanswered
    timer = threading.Timer(10.0, os.kill, (backend, signal.SIGCONT))
    timer.start()
    try:
        t0 = time.monotonic()
        res = cluster.cli("up", "--timeout", "120", timeout=200)
        took = time.monotonic() - t0
    finally:
        timer.cancel()
        os.kill(backend, signal.SIGCONT)
    assert res.code == 0, res
    assert took < 60, took
    assert cluster.backend_pid() == backend          # adopted, not replaced
    assert _owner_epoch(cluster) == epoch            # never fenced off
    assert cluster.pids() == apps
    assert _generations(cluster) == [backend]


def test_a_start_beside_a_backend_that_stays_stopped_blocks_at_once_naming_it(cluster):
    backend, epoch, apps = _orphan_a_stopped_backend(cluster)
    try:
        t0 = time.monotonic()
        res = cluster.cli("up", "--timeout", "120", timeout=200)
        took = time.monotonic() - t0
        assert res.code == 1, res
        err = res.out["error"]
        assert err["code"] == "RECOVERY_BLOCKED", err
        assert f"backend pid {backend} is alive but does not answer" in err["msg"], err
        assert f"kill -CONT {backend}" in err["msg"], err
        assert took < 60, took        # was ~100 s of attempts, each fencing it off
        assert _owner_epoch(cluster) == epoch
        assert _generations(cluster) == [backend]
    finally:
        os.kill(backend, signal.SIGCONT)
    # no `tenure backend recover`: the guardian asks again and adopts it by itself
    st = _unblocked(cluster)
    assert cluster.backend_pid() == backend          # the one that answers again
    assert st["current"]["pid"] == backend, st
    assert _owner_epoch(cluster) == epoch
    assert cluster.pids() == apps


def test_a_start_blocked_beside_a_stopped_backend_recovers_once_it_is_killed(cluster):
    backend, epoch, apps = _orphan_a_stopped_backend(cluster)
    try:
        res = cluster.cli("up", "--timeout", "120", timeout=200)
        assert res.code == 1 and res.out["error"]["code"] == "RECOVERY_BLOCKED", res
        assert f"or stop it (`kill {backend}`)" in res.out["error"]["msg"], res
    finally:
        os.kill(backend, signal.SIGKILL)   # stopped: ended at once, by its pid
    st = _unblocked(cluster)
    assert st["current"]["pid"] not in (None, backend), st   # recovered by itself
    assert _owner_epoch(cluster) > epoch               # the new generation's fence
    assert cluster.pids() == apps                      # nothing restarted


def _unblocked(cluster, within: float = 60.0) -> dict:
    """The guardian's status once it is no longer blocked and a generation is in
    control; its ``current``: that generation."""
    deadline = time.monotonic() + within
    st: dict = {}
    while time.monotonic() < deadline:
        with cluster.guardian() as g:
            st = g.call("status")
        if not st.get("blocked") and (st.get("backend") or {}).get("pid"):
            return {**st, "current": st["backend"]}
        time.sleep(0.5)
    raise AssertionError(f"still blocked after {within:.0f} s: {st}")
