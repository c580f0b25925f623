"""`tenure job logs ID` on a real tenure prints a job's output as `tenure logs` does: on a
terminal its control sequences are shown as `\\xNN`, `-n N` is the last N lines (`-n 0`
none), and a negative `-n` is a usage error for both commands.

Was: the job's escape sequences reached the terminal raw (it could clear the screen and
retitle the window), and `-n 0` printed every line (the slice `recs[-0:]`)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from typing import Any

SCRIPT = (r"printf 'before\\033[2J\\033]0;pwned\\007after\\n'; "
          "for i in 1 2 3; do echo line $i; done")
CONFIG = f'[stacks.j.jobs.evil]\ncommand = ["sh", "-c", "{SCRIPT}"]\n'

EVIL = "before\x1b[2J\x1b]0;pwned\x07after"
SHOWN = "before\\x1b[2J\\x1b]0;pwned\\x07after"


def on_a_terminal(cluster: Any, *args: str) -> str:
    """The stdout of `tenure ARGS` run with a pseudo-terminal as its stdout (a small
    output: it must fit the terminal's buffer)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "backend.cli.main", "--home", str(cluster.home), *args],
            stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            timeout=60, env={**os.environ, **cluster.env})
        assert proc.returncode == 0, proc.stderr
        os.close(slave)
        slave = -1
        return _drain(master).replace("\r\n", "\n")
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def _drain(master: int) -> str:
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:   # EIO: the other side is closed and everything was read
            break
        if not chunk:
            break
        out += chunk
    return out.decode()


def test_job_logs_neutralise_a_terminal_and_count_lines_as_tenure_logs(cluster):
    cluster.up(CONFIG)
    job = str(cluster.cli("job", "run", "j/evil", "--wait", check=True).out["job"]["id"])
    every = [SHOWN, "line 1", "line 2", "line 3"]
    shown = on_a_terminal(cluster, "job", "logs", job)
    assert shown.splitlines() == every and "\x1b" not in shown and "\x07" not in shown
    assert f"j/job:evil/1: {SHOWN}\n" in on_a_terminal(cluster, "logs", "j")   # the same
    assert cluster.cli_text("job", "logs", job).splitlines()[0] == EVIL  # piped: as is
    assert cluster.cli_text("job", "logs", job, "-n", "0") == ""
    assert cluster.cli_text("job", "logs", job, "-n", "2").splitlines() == every[-2:]
    assert cluster.cli_text("job", "logs", job, "-n", "9").splitlines()[1:] == every[1:]
    for command in (("job", "logs", job), ("logs", "j")):
        res = cluster.cli(*command, "-n", "-5")
        assert res.code == 2 and res.out["error"]["code"] == "BAD_REQUEST", res
