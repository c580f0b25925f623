"""A `tenure down` under way, seen from other commands through the real path: it stops
the guardian before it tells the owner to stop, and in that gap a command that found no
backend said the guardian was not running and the applications kept running (a keyed
`job run --wait`, `op show --wait`, `status`), and an `up` started a guardian that the
`down` then left without an owner. The `down` holds execution/maintenance.lock and
writes what it does there: they name it, and `up` waits for it to end.

The gap is held open here by holding the lock as a `down` does, with the guardian stopped
as a `down` stops it (a real `down` passes through the gap in well under a second)."""

from __future__ import annotations

import fcntl
import os
import signal
import time

from protocol.client import Client
from protocol.window import DOWN, holding

CONFIG = '[stacks.s.apps.a]\ncommand = ["sleep", "300"]\n' \
         '[stacks.j.jobs.echo]\ncommand = ["true"]\n'


def _hold_as_down(cluster) -> int:
    fd = os.open(cluster.home / "execution" / "maintenance.lock", os.O_RDWR | os.O_CREAT,
                 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, DOWN.encode())
    return fd


def _stop_guardian(cluster) -> None:
    with Client(cluster.layout.guardian_sock, pin=False, timeout=10) as c:
        guardian = int(c.call("status")["guardian"]["pid"])
    backend = cluster.backend_pid()
    os.kill(guardian, signal.SIGTERM)
    cluster.wait(lambda: not os.path.exists(f"/proc/{guardian}") and
                 not os.path.exists(f"/proc/{backend}"), what="guardian and backend gone")


def test_a_down_under_way_is_named_and_up_waits_for_it(cluster):
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    app = cluster.pids()
    _stop_guardian(cluster)
    fd = _hold_as_down(cluster)
    up = None
    try:
        st = cluster.cli("status")
        assert st.code == 3 and st.out["down_running"] == os.getpid(), st
        text = cluster.cli_text("status", expect=3)
        assert f"`tenure down` (pid {os.getpid()}) is stopping tenure" in text, text
        assert "keep running" not in text, text

        res = cluster.cli("job", "run", "j/echo", "--key", "K", "--wait", "--timeout", "20")
        err = res.out["error"]
        assert res.code == 3 and err["code"] == "BACKEND_UNAVAILABLE", res
        assert "none is coming; `tenure down` (pid" in err["msg"], err
        assert "keep running" not in err["msg"], err
        assert err["data"]["down_running"] == os.getpid(), err

        up = cluster.follow("up", "--timeout", "60")
        time.sleep(1.5)
        assert up.poll() is None, up.communicate()   # waits for the `down`
        assert not os.path.exists(cluster.layout.guardian_sock) or \
            cluster.cli("status").code == 3   # and started no guardian meanwhile
    finally:
        os.close(fd)
    out, err_text = up.communicate(timeout=120)
    assert up.returncode == 0, (out, err_text)
    assert f"`tenure down` (pid {os.getpid()}) is stopping tenure; waiting" in err_text
    assert cluster.pids() == app   # the owner and its app were never touched


def test_up_gives_up_on_a_down_that_does_not_end(cluster):
    cluster.up(CONFIG)
    _stop_guardian(cluster)
    fd = _hold_as_down(cluster)
    try:
        res = cluster.cli("up", "--timeout", "1")
        err = res.out["error"]
        assert res.code == 1 and err["code"] == "OPERATION_IN_PROGRESS", res
        assert err["msg"].startswith(f"a `tenure down` runs on this home (pid {os.getpid()})")
        assert err["data"]["holder"] == DOWN
    finally:
        os.close(fd)
    cluster.up()


def test_a_real_down_says_what_holds_the_lock_and_leaves_it_empty(cluster):
    cluster.up('[stacks.s.apps.a]\ncommand = ["sh", "-c", "trap \'\' TERM; sleep 300"]\n'
               'stop = { timeout = 3 }\n')
    cluster.wait_ready(1)
    down = cluster.follow("down")
    seen = []
    deadline = time.monotonic() + 10
    while down.poll() is None and time.monotonic() < deadline:
        held = holding(cluster.home)
        if held is not None:
            seen.append(held)
        time.sleep(0.05)
    down.communicate(timeout=60)
    assert down.returncode == 0
    # (None: read in the instant between the lock and its words, or its end)
    assert {doing for _, doing in seen} - {None} == {DOWN}, seen
    assert (cluster.home / "execution" / "maintenance.lock").read_bytes() == b""
