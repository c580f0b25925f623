"""`tenure up` while the owner is still shutting down (a `tenure down` cut short by
Ctrl-C after it had stopped the guardian and signalled the owner) waits for that owner
to end, then starts a new owner and guardian: the apps come back. It used to start only
a guardian, which pinned the owner about to go and then refused the next one, and every
later `up` waited 120 s for a backend that never came."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from protocol.procfs import running

SLOW_STOP = ('[stacks.s.apps.a]\ncommand = ["sh", "-c", "trap \'sleep 3; exit 0\' TERM; '
             'while :; do sleep 0.2; done"]\nstop = { timeout = 10 }\n')


def _stop(pid: int, ticks: int, wait: bool) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while wait and running(pid, ticks) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_up_waits_for_an_owner_that_is_shutting_down(cluster: Any) -> None:
    cluster.up(SLOW_STOP)
    st = cluster.cli("backend", "status", check=True).out
    guardian = st["guardian"]
    owner = cluster.cli("owner", "status", check=True).out["owner"]
    _stop(guardian["pid"], guardian["start_ticks"], wait=True)   # what `down` does first
    _stop(owner["pid"], owner["start_ticks"], wait=False)        # then Ctrl-C
    said = cluster.cli_text("status", expect=3)
    assert f"the owner (pid {owner['pid']}) is shutting down" in said, said
    up = cluster.cli("up", "--timeout", "30", timeout=120)
    assert up.ok, (up.out, up.stderr[-800:])
    assert "is shutting down" in up.stderr and f"pid {owner['pid']}" in up.stderr
    assert up.out["started"] == {"owner": True, "guardian": True}
    assert not running(owner["pid"], owner["start_ticks"])
    new = cluster.cli("owner", "status", check=True).out["owner"]["pid"]
    assert new != owner["pid"]
    cluster.wait(lambda: [r["state"] for r in cluster.apps().values()] == ["ready"], 30,
                 "the app is back")
