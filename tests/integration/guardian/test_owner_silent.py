"""An upgrade asked while the owner does not answer (stopped with SIGSTOP) ends in
seconds, before anything changed, and says what the owner's process is doing. Before,
it waited for the owner connection's 60 s and said only "status: no answer in time"."""

from __future__ import annotations

import os
import signal
import time

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n'


def test_an_upgrade_with_a_stopped_owner_aborts_at_once_and_names_it(cluster) -> None:
    cluster.up(ONE)
    cluster.wait_ready(1)
    release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    owner = cluster.status()["owner"]["pid"]
    before = (cluster.pids(), cluster.backend_pid())
    os.kill(owner, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        res = cluster.cli("backend", "upgrade", release, timeout=120)
        took = time.monotonic() - t0
    finally:
        os.kill(owner, signal.SIGCONT)
    act = res.out["activation"]
    assert res.code != 0 and (act["phase"], act["code"]) == ("aborted", "TIMEOUT"), res
    assert act["error"] == (
        f"the owner did not answer within 5 s: pid {owner} is stopped (SIGSTOP or a "
        f"debugger); kill -CONT {owner} continues it. Nothing was changed")
    assert took < 30, took   # the 5 s check, not the connection's 60 s
    assert (cluster.pids(), cluster.backend_pid()) == before
    text = cluster.cli_text("status")
    assert "s/a/0" in text and "ready" in text, text
