"""Stops under way share the owner's looks for orphans. Each stop looked before each
signal and each 20 ms check of its group, and at each exit, every look reading the
owner's whole list of children: N apps stopped at once cost O(N^2) (60 stops here took
240 looks; a stack stop of 2,500 apps 9 s, of 5,000 half a minute, and the owner
answered nothing meanwhile). Now they take fewer looks than there are stops, and every
stop is still confirmed as before. A child process: becoming a subreaper is for life."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HELPER = """
import asyncio, json, os, signal, sys
import owner.proctrack as proctrack
from owner.procs import ProcessTable, LaunchSpec, become_subreaper
from owner.specs import StopPolicy

N = 60
looks = [0]
real = proctrack.main_thread_children

def counting(pid):
    looks[0] += 1
    return real(pid)
proctrack.main_thread_children = counting

async def main():
    table = ProcessTable(lambda *a: None, reap_orphans=True)
    env = {"PATH": "/usr/bin:/bin"}
    keys = []
    for i in range(N):
        sp = table.launch(LaunchSpec(("sh", "-c", "sleep 100 & exec sleep 100"), env), f"k{i}")
        os.close(sp.stdout_fd)
        os.close(sp.stderr_fd)
        keys.append(f"k{i}")
    looks[0] = 0
    policy = StopPolicy(signal=signal.SIGTERM, timeout=10, kill_after=10)
    res = await asyncio.gather(*(table.stop(k, policy) for k in keys))
    left = [p for p in table.descendants()]
    table.close()
    print(json.dumps({"looks": looks[0], "outcomes": sorted({r.outcome.value for r in res}),
                      "left": len(left)}))

become_subreaper()
asyncio.run(main())
"""


def test_sixty_stops_at_once_share_their_looks_and_each_is_confirmed() -> None:
    out = subprocess.run([sys.executable, "-c", HELPER], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).parents[3])
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["outcomes"] == ["stopped"], report   # the background sleeps too
    assert report["left"] == 0, report
    assert 0 < report["looks"] < 60, report   # counted where the table looks


BEHIND = """
import asyncio, json, os, time, psutil
from owner.procs import ProcessTable, LaunchSpec, become_subreaper

async def main():
    exits = {}
    done = asyncio.Event()

    def on_exit(key, pid, st):
        exits[key] = st.exit_code
        if len(exits) == 2:
            done.set()
    table = ProcessTable(on_exit, reap_orphans=True)
    env = {"PATH": "/usr/bin:/bin"}
    first = table.launch(LaunchSpec(("sh", "-c", "sleep 0.3; exit 7"), env), "first")
    app = table.launch(LaunchSpec(("sh", "-c", "sleep 0.2 & exit 0"), env), "app")
    for fd in (first.stdout_fd, first.stderr_fd, app.stdout_fd, app.stderr_fd):
        os.close(fd)
    time.sleep(1.5)   # the loop busy: the leaders and the orphan are all zombies at once
    await asyncio.wait_for(done.wait(), 30)
    for _ in range(200):
        await asyncio.sleep(0.01)
        if not [c for c in psutil.Process().children() if c.status() == "zombie"]:
            break
    zombies = [c.pid for c in psutil.Process().children() if c.status() == "zombie"]
    table.close()
    print(json.dumps({"exits": exits, "zombies": zombies, "reaped": table.orphans_reaped}))

become_subreaper()
asyncio.run(main())
"""


def test_orphans_behind_an_exit_left_to_its_pidfd_are_reaped() -> None:
    """The reaping of orphans leaves a launch's exited leader to its pidfd's callback:
    with two leaders and an orphan all exited at once, each leader's exit is reported
    with its status, once, and no zombie is left."""
    out = subprocess.run([sys.executable, "-c", BEHIND], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).parents[3])
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["exits"] == {"first": 7, "app": 0}, report
    assert report["zombies"] == [] and report["reaped"] >= 1, report
