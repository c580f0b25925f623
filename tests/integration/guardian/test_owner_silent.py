"""With the owner stopped (SIGSTOP): an upgrade ends in seconds, before anything
changed, and says what the owner's process is doing (before, it waited for the owner
connection's 60 s and said only "status: no answer in time"); `tenure status` answers at
once with the last state seen and the owner's pid named (before: TIMEOUT after 10 s)."""

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


def test_status_with_a_stopped_owner_answers_at_once_and_names_it(cluster) -> None:
    cluster.up(ONE)
    cluster.wait_ready(1)
    owner = cluster.status()["owner"]["pid"]
    os.kill(owner, signal.SIGSTOP)
    try:
        cluster.wait(lambda: cluster.status()["owner_link"]["current"] is False, 30,
                     "the backend's view of the owner gone stale")
        t0 = time.monotonic()
        text = cluster.cli_text("status", expect=5)
        took = time.monotonic() - t0
    finally:
        os.kill(owner, signal.SIGCONT)
    assert took < 5, took   # the owner is not waited for (it was: 10 s, then TIMEOUT)
    assert (f"pid {owner} is stopped (SIGSTOP or a debugger); kill -CONT {owner} "
            "continues it") in text, text
    assert "unknown (last seen ready" in text, text
    cluster.wait(lambda: cluster.status()["owner_link"]["current"] is True, 30,
                 "the owner answers again")


def test_restart_with_a_stopped_owner_is_refused_at_once(cluster) -> None:
    cluster.up(ONE)
    cluster.wait_ready(1)
    owner = cluster.status()["owner"]["pid"]
    before = cluster.pids()
    os.kill(owner, signal.SIGSTOP)
    try:
        cluster.wait(lambda: cluster.status()["owner_link"]["current"] is False, 30,
                     "the backend's view of the owner gone stale")
        res = cluster.cli("restart", "s/a", timeout=60)
    finally:
        os.kill(owner, signal.SIGCONT)
    assert res.code == 3, res
    err = res.out["error"]
    assert err["code"] == "OWNER_UNAVAILABLE", err
    assert f"(pid {owner} is stopped (SIGSTOP or a debugger); kill -CONT {owner} " \
        "continues it); restart s/a was not done" in err["msg"], err
    cluster.wait(lambda: cluster.status()["owner_link"]["current"] is True, 30,
                 "the owner answers again")
    assert cluster.pids() == before   # nothing was done, and nothing pending
    assert cluster.cli("restart", "s/a").code == 0
    assert cluster.pids() != before


def test_up_with_a_stopped_owner_starts_nothing_and_names_it(cluster) -> None:
    """Regression: `up` started a second owner, which found the first and exited, and
    the error ("owner did not come up (exit 5)") showed the first owner's old log;
    `owner status` said "cannot connect ...: timed out"."""
    cluster.up(ONE)
    cluster.wait_ready(1)
    owner = cluster.status()["owner"]["pid"]
    os.kill(owner, signal.SIGSTOP)
    try:
        res = cluster.cli("up", timeout=60)
        log = cluster.log("owner")
        asked = cluster.cli("owner", "status", timeout=60)
    finally:
        os.kill(owner, signal.SIGCONT)
    assert asked.code == 3 and asked.out["error"]["msg"] == (
        f"the owner (pid {owner}) accepts on {cluster.layout.owner_sock} but does not "
        f"answer: pid {owner} is stopped (SIGSTOP or a debugger); kill -CONT {owner} "
        "continues it"), asked
    assert res.code == 3, res
    err = res.out["error"]
    assert (err["code"], err["data"]["pid"], err["data"]["listening"]) == \
        ("CONNECT_FAILED", owner, True), err
    assert err["msg"] == (
        f"the owner (pid {owner}) accepts on {cluster.layout.owner_sock} but does not "
        f"answer: pid {owner} is stopped (SIGSTOP or a debugger); kill -CONT {owner} "
        "continues it. Nothing was started"), err
    assert log.count(" ready on ") == 1, log   # no second owner was started
    cluster.wait(lambda: cluster.status()["owner_link"]["current"] is True, 30,
                 "the owner answers again")
    assert cluster.cli("up").code == 0
