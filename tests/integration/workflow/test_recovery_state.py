"""Recovery certificates with real processes: `tenure backend status` says `ready` once
a certificate vouches for the apps and `pending (reason)` while a change runs (human and
--json); a certificate whose snapshot did not change is not written again."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

from guardian.recovery import read_certificate

SLOW_STOP = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: "
             "(time.sleep(2), sys.exit(0))); time.sleep(1e9)")
CONFIG = (f'[stacks.c.apps.slow]\ncommand = ["{sys.executable}", "-c", \'{SLOW_STOP}\']\n'
          "instances = 2\n")


def human_backend_status(cluster: Any) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "backend.cli.main", "--home",
                           str(cluster.home), "backend", "status"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, env=os.environ)
    assert proc.returncode == 0, proc.stderr
    return [" ".join(line.split()) for line in proc.stdout.splitlines()]  # not alignment


def test_backend_status_recovery_state_and_no_rewrite_of_an_unchanged_certificate(cluster):
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    cluster.wait(lambda: cluster.call("generation.certify")["published"], 30, "certified")
    first = read_certificate(cluster.layout.recovery_db)
    writes = cluster.call("generation.status")["certificate_writes"]
    for _ in range(3):
        assert cluster.call("generation.certify") == {"published": True}
    assert read_certificate(cluster.layout.recovery_db) == first   # not written again
    assert cluster.call("generation.status")["certificate_writes"] == writes

    st = cluster.cli("backend", "status", check=True).out
    assert st["recovery"] == {"state": "ready", "reason": None}, st
    assert "recovery: ready" in human_backend_status(cluster)

    stopping = threading.Thread(target=lambda: cluster.cli("stop", "c/slow/0"), daemon=True)
    stopping.start()
    cluster.wait(lambda: cluster.apps()["c/slow/0"]["state"] == "stopping", 10, "stopping")
    st = cluster.cli("backend", "status", check=True).out
    assert st["certificate"]["valid"] is False
    assert st["recovery"]["state"] == "pending", st
    assert st["recovery"]["reason"].startswith("stop in progress for"), st
    stopping.join(60)

    cluster.wait(lambda: cluster.call("generation.certify")["published"], 30, "certified")
    after = read_certificate(cluster.layout.recovery_db)
    assert after["valid"] and after["body"]["launches"] == 1
    assert cluster.cli("backend", "status", check=True).out["recovery"]["state"] == "ready"
