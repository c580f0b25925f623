"""The execution owner through its real RPC path: spawn rate, kill → exit event latency,
durable log capture, and the owner's memory with many idle apps.

    python bench/owner.py [--spawn 200] [--kills 200] [--lines 1000000] [--idle 1000]
                          [--user NAME]

``--user NAME`` launches the spawn-rate apps as that user (the owner runs as root here).

Prints each figure, then as its last line one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

# This script is named like the package it measures; drop its own directory from the
# import path so `owner` means tenure's package.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

from owner.testing import GuardianKey, OwnerProcess
from protocol.client import Client

WRITER = ("import sys\nw = sys.stdout.write\nfor i in range({n}):\n    w('line %d\\n' % i)\n")


class Bench:
    def __init__(self, owner: OwnerProcess, user: str | None = None) -> None:
        self.owner = owner
        self.identity = {} if user is None else {"identity": {"user": user}}
        self.c = owner.client()
        self.epoch = GuardianKey().bootstrap(self.c, owner.instance)
        self.n = 0

    def launch(self, argv: list[str], app: str = "a", as_user: bool = False
               ) -> dict[str, Any]:
        self.n += 1
        extra = self.identity if as_user else {}
        return self.c.call("launch", {
            "launch_key": f"b{self.n}", "stack": "bench", "app": app, "instance": self.n,
            "generation": 1, "argv": argv, "env": {"PATH": os.environ["PATH"]},
            "stop": {"signal": "KILL", "timeout": 5}, **extra}, epoch=self.epoch)

    def stop_all(self) -> None:
        for r in self.c.call("inventory")["launches"]:
            self.c.call("stop", {"launch_key": r["launch_key"]}, epoch=self.epoch)


def spawn_rate(b: Bench, n: int) -> tuple[float, list[dict[str, Any]]]:
    t0 = time.perf_counter()
    rows = [b.launch(["sleep", "100000"], as_user=True) for _ in range(n)]
    return n / (time.perf_counter() - t0), rows


def exit_latency(b: Bench, rows: list[dict[str, Any]]) -> list[float]:
    sub = Client(b.owner.paths.sock)
    sub.call("observations.subscribe", {"after": b.c.call("observations.read",
                                                           {"after": 0})["newest"]})
    out = []
    for r in rows:
        t0 = time.perf_counter()
        os.kill(r["pid"], signal.SIGKILL)
        while True:
            ev = sub.next_event(10.0)
            if ev is None:
                raise RuntimeError(f"no exit event for pid {r['pid']}")
            if ev.e.get("kind") == "exit" and ev.e.get("pid") == r["pid"]:
                out.append((time.perf_counter() - t0) * 1e6)
                break
    sub.close()
    return out


def log_capture(b: Bench, lines: int) -> tuple[float, int]:
    """Launch a writer; time until its last line is committed; then count what is there."""
    base = b.c.call("status")["log_last_id"]
    t0 = time.perf_counter()
    b.launch([sys.executable, "-c", WRITER.format(n=lines)], app="writer")
    last, t_last, stable_since = base, t0, time.perf_counter()
    while time.perf_counter() - stable_since < 2.0 and last - base < lines:
        now = b.c.call("status")["log_last_id"]
        if now != last:
            last, t_last, stable_since = now, time.perf_counter(), time.perf_counter()
        time.sleep(0.005)
    count, after = 0, base
    while recs := b.c.call("logs.read", {"after": after, "limit": 10000,
                                         "app": "writer"})["records"]:
        count += len(recs)
        after = recs[-1]["id"]
    return lines / (t_last - t0), lines - count


def idle_rss(b: Bench, n: int) -> float:
    for _ in range(n):
        b.launch(["sleep", "100000"], app="idle")
    time.sleep(1.0)
    assert b.owner.proc is not None
    return psutil.Process(b.owner.proc.pid).memory_info().rss / 2**20


def measure(b: Bench, a: argparse.Namespace) -> tuple[float, list[float], float, int]:
    rate, rows = spawn_rate(b, a.spawn)
    lat = exit_latency(b, rows)
    lps, lost = log_capture(b, a.lines)
    return rate, lat, lps, lost


def with_owner(fn: Any, user: str | None = None) -> Any:
    """Run ``fn(bench)`` against a new owner in a new home; stop and clean up after."""
    home = Path(tempfile.mkdtemp(prefix="tbo", dir="/tmp"))
    os.chmod(home, 0o700)
    owner = OwnerProcess(home)
    try:
        owner.start()   # inside: a SIGTERM while it starts cleans up too
        b = Bench(owner, user)
        out = fn(b)
        b.stop_all()
        b.c.close()
        return out
    finally:
        if owner.proc is not None:
            owner.stop(signal.SIGTERM, timeout=120)
        shutil.rmtree(home, ignore_errors=True)


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _terminated(signum: int, _frame: object) -> None:
    """SIGTERM (bench/suite.py's time cap) ends the run like Ctrl-C: the owner it
    started is stopped, with its apps, and its home removed (with_owner's cleanup)."""
    raise SystemExit(128 + signum)


def main() -> int:
    signal.signal(signal.SIGTERM, _terminated)
    ap = argparse.ArgumentParser()
    ap.add_argument("--spawn", type=int, default=200)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--user", default=None, help="launch the spawn-rate apps as this user")
    a = ap.parse_args()
    rate, lat, lps, lost = with_owner(lambda b: measure(b, a), a.user)
    rss = with_owner(lambda b: idle_rss(b, a.idle))  # a fresh owner: no log-burst memory
    res = {"spawn_per_s": round(rate, 1), "exit_event_p50_us": round(percentile(lat, 0.5)),
           "exit_event_p99_us": round(percentile(lat, 0.99)), "log_lines_per_s": round(lps),
           "log_lines_lost": lost, "owner_rss_mb_1000": round(rss, 1)}
    print(f"spawn via RPC: {res['spawn_per_s']}/s for {a.spawn} apps")
    print(f"kill -9 -> exit event at a subscriber: p50 {res['exit_event_p50_us']} us, "
          f"p99 {res['exit_event_p99_us']} us")
    print(f"log capture: {res['log_lines_per_s']} lines/s durable, {lost} lost "
          f"(target >= 200000/s, 0 lost)")
    print(f"owner RSS with {a.idle} idle apps: {res['owner_rss_mb_1000']} MiB (target <= 60)")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
