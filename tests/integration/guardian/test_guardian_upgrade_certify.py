"""Regression: a backend that stopped answering between `tenure guardian upgrade`'s check
of it and the exec killed the guardian. On its way to the exec the guardian asks the
backend for a last certificate (best-effort, should the new guardian not come up); the
call timed out, its TenureError skipped the rest of the orderly exit and the exec and
ended the guardian with exit status 2: no guardian left, the backend re-parented to
PID 1 unwatched, the guardian-release record left a `trial`. Now the failed certificate
is logged and the exec goes ahead."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_guardian_upgrade import _guardian, _up, releases  # noqa: F401 (a fixture)
from test_handoff_support import install


def _stop_backend_at_preflight(guardian: int, backend: int, stopped: threading.Event,
                               done: threading.Event) -> None:
    """SIGSTOP ``backend`` once ``guardian`` runs its candidate's preflight (after it
    checked that the backend answers); SIGCONT it once the guardian exec'd into its new
    release (its command line then carries `--inherit-lock`) or is gone."""
    me = psutil.Process(guardian)
    deadline = time.monotonic() + 120
    try:
        while not done.is_set() and time.monotonic() < deadline:
            try:
                kids = [" ".join(k.cmdline()) for k in me.children()]
            except psutil.Error:
                return
            if any("--preflight" in k and "guardian" in k for k in kids):
                os.kill(backend, signal.SIGSTOP)
                stopped.set()
                break
            time.sleep(0.01)
        while stopped.is_set() and not done.is_set() and time.monotonic() < deadline:
            try:
                if "--inherit-lock" in me.cmdline():
                    break
            except psutil.Error:
                break   # the guardian is gone
            time.sleep(0.02)
    finally:
        if stopped.is_set():
            os.kill(backend, signal.SIGCONT)


def test_a_backend_silent_at_the_exec_does_not_kill_the_upgrading_guardian(
        cluster, releases):  # noqa: F811 (the fixture)
    pids, backend = _up(cluster)
    before = _guardian(cluster)
    rid = install(cluster, releases.newer)
    gpid = before["guardian"]["pid"]
    stopped, done = threading.Event(), threading.Event()
    watcher = threading.Thread(target=_stop_backend_at_preflight,
                               args=(gpid, backend, stopped, done), daemon=True)
    watcher.start()
    try:
        res = cluster.cli("guardian", "upgrade", rid, timeout=300)
    finally:
        done.set()
        watcher.join(30)
        os.kill(backend, signal.SIGCONT)
    assert stopped.is_set()
    assert res.code == 0, res   # was 1: GUARDIAN_UPGRADE_FAILED "… exited before it confirmed"
    after = _guardian(cluster)
    assert after["guardian"]["pid"] == gpid
    assert after["guardian_release"]["running"] == rid
    assert after["guardian_release"]["state"] == "selected"
    assert psutil.Process(backend).ppid() == gpid    # still the guardian's child
    assert cluster.backend_pid() == backend and cluster.pids() == pids
    assert "no last certificate before the exec" in cluster.log("guardian")
