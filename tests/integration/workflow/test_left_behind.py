"""What an app's process leaves running when it ends is stopped: a worker started in
the background by a leader that exited stayed, unseen by status, and a restart ran a
second one beside it (each `tenure start` of such an app added one more)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from backend.testing import sleeping
from protocol.procfs import running, start_ticks


def app(name: str, script: str, restart: str) -> str:
    return (f'[stacks.s.apps.{name}]\ncommand = ["sh", "-c", "{script}"]\n'
            f'restart = "{restart}"\n')


def child(path: Path, cluster: Any) -> tuple[int, int]:
    cluster.wait(lambda: path.exists() and path.read_text().strip() != "", 30,
                 f"{path.name} written")
    pid = int(path.read_text())
    ticks = start_ticks(pid)
    assert ticks is not None
    return pid, ticks


def test_what_an_exited_leader_left_running_is_stopped(cluster):
    fork, roll = cluster.home / "fork.pid", cluster.home / "roll.pid"
    cluster.up(app("fork", f"sleep 100017 & echo $! > {fork}; exit 0", "never")
               + app("roll", f"sleep 1006 & echo $! > {roll}; wait", "always"))
    cluster.wait(lambda: fork.exists() and fork.read_text().strip() != "", 30, "forked")
    cluster.wait(lambda: cluster.apps()["s/fork/0"]["pid"] is None, 30, "fork exited")
    cluster.wait(lambda: sleeping("100017") == [], 30, "the exited app's child stopped")

    first = child(roll, cluster)
    leader = cluster.wait_ready(1)["s/roll/0"]["pid"]
    roll.write_text("")
    os.kill(leader, signal.SIGKILL)
    second = child(roll, cluster)
    cluster.wait(lambda: not running(*first), 30, "the killed leader's child stopped")
    assert running(*second) and cluster.apps()["s/roll/0"]["restarts"] == 1


def stubborn(kid: Path) -> str:
    """sh that starts, in a session of its own, a child that ignores SIGTERM and then
    writes its pid to ``kid``, and waits (10 s at most) until it did. Was: the leader
    wrote the pid itself and exited 0.3 s later; on a loaded machine the child's python
    had not ignored SIGTERM yet when the stop of the leftovers came, and died at once."""
    code = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "open(sys.argv[1], chr(119)).write(str(os.getpid())); time.sleep(1000)")
    return (f"setsid python3 -c '{code}' {kid} & i=0; "
            f"while [ ! -s {kid} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done")


def test_a_restart_waits_until_what_the_last_run_left_is_stopped(cluster):
    """A child that ignores SIGTERM outlives its leader for the stop's timeout (2 s):
    the restart ran beside it (0.1 s after the exit), and status showed the instance
    restarting with nothing said of it, though docs/config.md promised nothing of the
    old run is left."""
    kid, first = cluster.home / "kid.pid", cluster.home / "first"
    script = (f"if [ ! -e {first} ]; then touch {first}; {stubborn(kid)}; fi; "
              "sleep 0.3; exit 1")
    # the wait lasts the stop of the leftovers: 4 s, for a loaded machine's polls to see
    cluster.up(app("stub", script, "on-failure")
               + "backoff = { initial = 0.1, max = 0.1 }\nstop = { timeout = 4 }\n")
    pid, ticks = child(kid, cluster)
    leader = cluster.apps()["s/stub/0"]["pid"]
    cluster.wait(lambda: cluster.apps()["s/stub/0"]["pid"] != leader, 30, "the exit")
    said, deadline = set(), time.monotonic() + 30
    while running(pid, ticks):
        assert time.monotonic() < deadline, "the last run's child was not stopped"
        row = cluster.apps()["s/stub/0"]
        assert row["pid"] is None, ("launched beside the last run's child", row)
        said.add(row["reason"])
    assert any(r and "stopping 1 process(es) the last run left running" in r
               for r in said), said
    cluster.wait(lambda: cluster.apps()["s/stub/0"]["pid"] is not None, 30, "the restart")
    first_exit = cluster.cli("events", "s/stub", "--kind", "exit", "-n", "100").out
    first_exit = first_exit if isinstance(first_exit, dict) else \
        json.loads(first_exit.splitlines()[0])
    assert first_exit["data"]["left_running"] == 1, first_exit


def test_a_stop_returns_once_what_the_last_run_left_is_stopped(cluster):
    """`tenure stop` of an instance that had exited returned at once, `stopped`, while
    its leader's child still ran."""
    kid = cluster.home / "kid.pid"
    script = f"{stubborn(kid)}; sleep 0.3; exit 0"
    cluster.up(app("stub", script, "never") + "stop = { timeout = 2 }\n")
    pid, ticks = child(kid, cluster)
    cluster.wait(lambda: cluster.apps()["s/stub/0"]["detail"] == "exited", 30, "the exit")
    row = cluster.apps()["s/stub/0"]
    if running(pid, ticks):   # within the stop's 2 s
        assert row["reason"] == "exited 0; stopping 1 process(es) the last run left " \
                                "running", row
    assert cluster.cli("stop", "s/stub").code == 0
    assert not running(pid, ticks)


@pytest.mark.parametrize("command", ["stop", "restart"])
def test_a_stop_or_restart_during_the_wait_runs_no_untracked_copy(cluster, command):
    """`tenure stop` while the restart waited for the last run's leftovers marked the
    instance stopped, and the launch went out after it: its process ran untracked
    (status said `stopped`; only `tenure down` ended it). `tenure restart` there ran
    two copies."""
    kid, first = cluster.home / "kid.pid", cluster.home / "first"
    script = (f"if [ ! -e {first} ]; then touch {first}; {stubborn(kid)}; sleep 0.3; "
              "exit 1; fi; exec sleep 100023")
    # the wait lasts the stop of the leftovers: 4 s, for a loaded machine's polls to see
    cluster.up(app("stub", script, "on-failure")
               + "backoff = { initial = 0.1, max = 0.1 }\nstop = { timeout = 4 }\n")
    pid, ticks = child(kid, cluster)
    cluster.wait(lambda: "the last run left running" in
                 (cluster.apps()["s/stub/0"]["reason"] or ""), 30, "the wait for the leftovers")
    assert running(pid, ticks)
    assert cluster.cli(command, "s/stub").code == 0
    cluster.wait(lambda: not running(pid, ticks), 30, "the leftovers stopped")
    row = cluster.apps()["s/stub/0"]
    if command == "stop":
        time.sleep(0.5)   # a launch sent after the wait would have run by now
        assert sleeping("100023") == [] and cluster.apps()["s/stub/0"]["pid"] is None
    else:
        row = cluster.wait_ready(1)["s/stub/0"]
        assert sleeping("100023") == [row["pid"]], (sleeping("100023"), row)
