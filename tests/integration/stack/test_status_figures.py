"""CPU and memory in `status` and `inspect` through the real backend and owner: a
process's figures stand for backend.usage.FRESH_S (a poll within that time shows the
same measurement, without asking the owner), then it is measured again and its CPU
percent is the rate over the time between the two measurements."""

from __future__ import annotations

import sys
import time

from backend.usage import FRESH_S

# busy for at most 30 s (the test needs a few), then idle until stopped
BUSY = ("import time\nt = time.time()\nwhile time.time() - t < 30:\n    pass\n"
        "time.sleep(100000)\n")


def figures(cluster, how: str) -> tuple[float, int]:
    if how == "status":
        row = cluster.apps()["s/busy/0"]
    else:
        row = cluster.call("inspect", {"target": "s/busy/0"})["instances"][0]
    return row["cpu_percent"], row["rss"]


def test_figures_stand_briefly_then_the_rate_covers_the_time_between(cluster):
    cluster.up(f'[stacks.s.apps.busy]\ncommand = ["{sys.executable}", "-c", {BUSY!r}]\n'
               .replace("'", '"'))
    cluster.wait_ready(1)
    for how in ("status", "inspect"):
        time.sleep(FRESH_S + 0.1)           # what an earlier call measured has expired
        first = figures(cluster, how)
        again = [figures(cluster, how) for _ in range(5)]   # well within FRESH_S
        assert again == [first] * 5, (how, first, again)
        time.sleep(FRESH_S + 0.1)
        cpu, rss = figures(cluster, how)
        # a busy loop over the ~0.6 s since the last measurement (not over the
        # milliseconds since the previous call, which jiffies make 0 or several cores)
        assert 50.0 <= cpu <= 130.0 and rss > 0, (how, cpu, rss)
