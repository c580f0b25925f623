"""SIGHUP, SIGUSR1 and SIGUSR2 (`kill -HUP` to "reload", a logrotate postrotate) are
logged and ignored by every daemon. Before, SIGHUP ended the owner at once and left its
applications without an owner until a reconcile. Applications still start with the
default disposition of each."""

from __future__ import annotations

import os
import time

from protocol.procfs import running, start_ticks
from protocol.stray import STRAY

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n'


def _dispositions(pid: int) -> dict[str, int]:
    """SigIgn and SigCgt of ``pid``, as bit masks."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("SigIgn", "SigCgt"):
                out[key] = int(value.strip(), 16)
    return out


def test_stray_signals_end_no_daemon_and_apps_start_with_the_defaults(cluster):
    cluster.up(ONE)
    cluster.wait_ready(1)
    st = cluster.status()
    owner, guardian = cluster.daemon_pids()
    backend = st["backend"]["pid"]
    daemons = {name: (pid, start_ticks(pid)) for name, pid in
               (("owner", owner), ("guardian", guardian), ("backend", backend))}
    [(app_pid, app_ticks)] = cluster.pids().values()
    for pid, _ticks in daemons.values():
        for sig in STRAY:
            os.kill(pid, sig)
    time.sleep(0.5)
    assert [n for n, (pid, ticks) in daemons.items() if not running(pid, ticks)] == []
    assert running(app_pid, app_ticks)
    assert cluster.status()["owner_link"]["state"] == "connected"
    for name in ("owner", "guardian"):
        log = cluster.log(name)
        for sig in STRAY:
            assert f"{sig.name} ignored: the {name} reloads nothing" in log, log[-2000:]
    assert "SIGHUP ignored: the backend" in cluster.backend_log()

    cluster.cli("restart", "s/a", check=True)   # a new process of the app
    [(new_pid, _)] = cluster.pids().values()
    assert new_pid != app_pid
    masks = _dispositions(new_pid)
    for sig in STRAY:
        bit = 1 << (sig - 1)
        assert not masks["SigIgn"] & bit and not masks["SigCgt"] & bit, (sig, masks)
    assert cluster.down().ok and cluster.leftovers() == []
    receipt = (cluster.layout.execution / "owner-receipt.json").read_text()
    assert '"state": "clean"' in receipt

