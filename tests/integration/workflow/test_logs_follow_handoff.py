"""`tenure logs -f` and `tenure job logs ID -f` live through `tenure backend upgrade` (a
hot handoff of the control plane) on a real tenure: they keep running and print the
lines written after it, none lost and none twice.

Was: both died during the handoff, with BACKEND_UNAVAILABLE (exit 3) or SHUTTING_DOWN
(exit 1), while `tenure events -f` lived through it."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

PY = sys.executable


def config(stop: str) -> str:
    ticker = ("import itertools, time\\nfor i in itertools.count(): "
              "print('tick', i, flush=True); time.sleep(0.02)")
    job = (f"import itertools, os, time\\nfor i in itertools.count():\\n "
           f"print('job tick', i, flush=True)\\n if os.path.exists('{stop}'): break\\n "
           f"time.sleep(0.02)")
    slow = ("import signal, sys, time\\nsignal.signal(signal.SIGTERM, lambda *a: "
            "(time.sleep(2), sys.exit(0)))\\nprint('armed', flush=True)\\ntime.sleep(1e9)")
    return (f'[stacks.s.apps.ticker]\ncommand = ["{PY}", "-c", "{ticker}"]\n'
            f'[stacks.d.apps.slow]\ncommand = ["{PY}", "-c", "{slow}"]\n'
            'stop = { timeout = 30 }\n'
            f'[stacks.j.jobs.count]\ncommand = ["{PY}", "-c", "{job}"]\ntimeout = 300\n')


class Follower:
    """A `tenure ARGS` follower whose stdout lines are collected as they come."""

    def __init__(self, cluster: Any, *args: str) -> None:
        self.proc = cluster.follow(*args)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def end(self, timeout: float = 30) -> tuple[int, str]:
        """Its exit status (terminated if still running) and its stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
        self._reader.join(timeout=timeout)
        _, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, err


def ticks(lines: list[str], prefix: str) -> list[int]:
    """The counters of ``lines``, which must all be ``prefix N``."""
    assert lines and all(line.startswith(prefix) for line in lines), lines[:5]
    return [int(line.removeprefix(prefix)) for line in lines]


def upgrade_while_draining_for_seconds(cluster: Any) -> Any:
    """`tenure backend upgrade` to the current release while a restart of an app that
    takes 2 s to stop is in flight: the old generation drains (answers SHUTTING_DOWN)
    until that restart ended, so every follower meets the handoff."""
    release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    restart = threading.Thread(target=cluster.cli, args=("restart", "d/slow"))
    restart.start()
    try:
        cluster.wait(lambda: cluster.apps()["d/slow/0"]["state"] == "stopping", 10,
                     "the restart stopping the slow app")
        up = cluster.cli("backend", "upgrade", release, timeout=300)
    finally:
        restart.join(timeout=180)
    [draining] = [r for r in up.out["receipts"] if r["phase"] == "draining"]
    assert draining["detail"]["waited_for"], draining   # the drain lasted
    return up


def test_logs_and_job_logs_followers_live_through_a_backend_upgrade(cluster):
    stop = cluster.home / "job-stop"
    cluster.up(config(str(stop)))
    cluster.wait_ready(2)
    cluster.wait(lambda: cluster.cli_text("logs", "d/slow") == "d/slow/0: armed\n", 30,
                 "the slow app's SIGTERM handler in place")
    job = cluster.cli("job", "run", "j/count", check=True).out["job"]["id"]
    cluster.wait(lambda: cluster.call("job.show", {"id": job})["state"] == "running", 30,
                 "the job running")
    logs = Follower(cluster, "logs", "-f", "-n", "0", "s/ticker")
    job_logs = Follower(cluster, "job", "logs", str(job), "-f")
    try:
        cluster.wait(lambda: len(logs.lines) > 5 and len(job_logs.lines) > 5, 30,
                     "both followers printing")
        up = upgrade_while_draining_for_seconds(cluster)
        assert up.ok and up.out["activation"]["phase"] == "complete", up
        for follower in (logs, job_logs):
            assert follower.proc.poll() is None, follower.end()
        at_upgrade = ticks(cluster.cli_text("logs", "-n", "1", "s/ticker").splitlines(),
                           "s/ticker/0: tick ")[0]
        cluster.wait(lambda: ticks(logs.lines, "s/ticker/0: tick ")[-1] > at_upgrade + 20,
                     30, "lines written after the upgrade")
        stop.touch()
        job_logs.proc.wait(timeout=60)     # it ends with the job
    finally:
        logs_code, logs_err = logs.end()
        job_code, job_err = job_logs.end()
    assert job_code == 0, job_err
    seen = ticks(logs.lines, "s/ticker/0: tick ")
    assert seen == list(range(seen[0], seen[0] + len(seen))), "a gap or a repeat"
    done = ticks(job_logs.lines, "job tick ")
    assert done == list(range(len(done))), "a gap or a repeat"
    assert cluster.call("job.show", {"id": job})["state"] == "succeeded"
    assert logs_code == -signal.SIGTERM, logs_err   # it was still following
