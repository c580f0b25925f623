"""What an app's process leaves running when it ends is stopped: a worker started in
the background by a leader that exited stayed, unseen by status, and a restart ran a
second one beside it (each `tenure start` of such an app added one more)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

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


def sleeping(seconds: str) -> list[int]:
    """Pids of `sleep SECONDS` (a number no other test uses)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] == [b"sleep", seconds.encode()]:
                    found.append(int(pid))
        except OSError:
            continue
    return found


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
