"""`tenure logs` of several targets on a real tenure, one of them with more lines than a
page: every line once and in journal order, with --since, with -n (the last N of all
the targets together), with -f -n (no more than N before new lines), and the same from
the journal file after `tenure down`.

Was: the merged page said the journal ended where the first page was cut, so a read
without -f stopped there (9,632 of 30,002 lines, exit 0), and -n took the last N of the
first merged page only (-f -n 20000 printed 20,002 lines)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

LINES = 30_000
CHATTY = (f"import sys, time\\nfor i in range({LINES}): print('a line', i)\\n"
          "sys.stdout.flush(); time.sleep(3600)")
CONFIG = f"""
[stacks.r.apps.a]
command = ["{sys.executable}", "-c", "{CHATTY}"]
[stacks.r.apps.b]
command = ["sh", "-c", "echo b one; echo b two; exec sleep 3600"]
[stacks.r.apps.c]
command = ["sh", "-c", "echo c one; exec sleep 3600"]
"""


def ids(cluster: Any, *args: str) -> list[int]:
    """The record ids `tenure --json logs ARGS` prints, checked to be in order."""
    out = cluster.cli_text("--json", "logs", *args, timeout=120)
    got = [json.loads(line)["id"] for line in out.splitlines()]
    assert got == sorted(got), "out of journal order"
    return got


def test_several_targets_give_every_line_once_and_the_last_n_of_them_all(cluster):
    cluster.up(CONFIG)
    last = f"r/a/0: a line {LINES - 1}\n"
    cluster.wait(lambda: cluster.cli_text("logs", "r/a", "-n", "1") == last, 60,
                 "every line of a")
    cluster.cli("restart", "r/b", check=True)   # b's new lines come after all of a's
    cluster.wait(lambda: len(ids(cluster, "r/b", "r/c", "--since", "0")) == 5, 30,
                 "the lines of b and c")
    union = sorted(ids(cluster, "r/a", "--since", "0") + ids(cluster, "r/b", "--since", "0"))
    assert len(union) == LINES + 4
    both = ("r/a", "r/b")
    assert ids(cluster, *both, "--since", "0") == union
    assert ids(cluster, *both, "-n", "20000") == union[-20_000:]
    assert ids(cluster, *both, "-n", "3") == union[-3:]
    assert ids(cluster, *both, "-n", "0") == []
    every = sorted(union + ids(cluster, "r/c", "--since", "0"))
    assert ids(cluster, "r/c", *both, "-n", str(LINES + 3)) == every[-(LINES + 3):]
    assert followed(cluster, *both, "-n", "20000") == union[-20_000:]
    cluster.down()
    assert ids(cluster, *both, "--since", "0") == union      # from the file
    assert ids(cluster, *both, "-n", "20000") == union[-20_000:]


def followed(cluster: Any, *args: str) -> list[int]:
    """What `tenure --json logs -f ARGS` prints until it has printed nothing for 1.5 s
    (the apps are quiet by now), at most 60 s."""
    follower = cluster.follow("--json", "logs", "-f", *args)
    lines: list[str] = []
    reader = threading.Thread(target=_read_into, args=(follower, lines))
    reader.start()
    try:
        deadline, seen, steady = time.monotonic() + 60, -1, time.monotonic()
        while time.monotonic() < deadline and (not lines or
                                               time.monotonic() - steady < 1.5):
            if len(lines) != seen:
                seen, steady = len(lines), time.monotonic()
            time.sleep(0.1)
    finally:
        follower.terminate()
        reader.join(timeout=30)
        follower.communicate(timeout=30)
    return [json.loads(line)["id"] for line in lines]


def _read_into(follower: subprocess.Popen[str], lines: list[str]) -> None:
    assert follower.stdout is not None
    for line in follower.stdout:
        lines.append(line)


BIG = ("import sys, time\\nfor i in range(500):\\n    print(sys.argv[1], i, 'x' * 4000)\\n"
       "    i % 5 or (sys.stdout.flush(), time.sleep(0.005))\\n"
       "sys.stdout.flush(); time.sleep(3600)")
BUSY = "".join(f'[stacks.m.apps.p{k}]\ncommand = ["{sys.executable}", "-c", "{BIG}", "p{k}"]\n'
               for k in range(1, 7))


def test_six_busy_apps_read_at_once_fit_in_an_answer(cluster):
    """Was: each target was read with a page of its own (1 MiB) and the merged answer,
    ~6 MiB of interleaved 4 kB lines, passed the 4 MiB a message may hold: `tenure logs`
    ended in INTERNAL (answer not encodable), also with -f."""
    cluster.up(BUSY)
    targets = [f"m/p{k}" for k in range(1, 7)]
    cluster.wait(lambda: all(cluster.cli_text("logs", t, "-n", "1").startswith(
        f"{t}/0: {t[2:]} 499 ") for t in targets), 60, "every line of the six apps")
    got = ids(cluster, *targets, "-n", "3000")
    assert len(got) == 3000 and len(set(got)) == 3000
    assert len(ids(cluster, *targets, "--since", "0")) == 3000
