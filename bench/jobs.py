"""Job ledger benchmark: admissions under backend crashes and handoffs.

Usage: python bench/jobs.py [--submissions 1000] [--duplicates 0.2] [--clients 8]
                            [--kills 3] [--upgrades 3] [--pace 0.4] [--keep]

Starts its own tenure (owner, guardian, backend) in a temporary home from a freshly sealed
release with one job template whose every run appends its job id to a file when its
process starts. ``--clients`` threads submit ``--submissions`` keyed jobs (a
``--duplicates`` share of them repeat an earlier key), each retrying with the same key
whenever the backend is away or an answer is lost — as `tenure job run --key` does.
Meanwhile the backend is SIGKILLed ``--kills`` times and handed over (`tenure backend
upgrade` to the selected release) ``--upgrades`` times, spread over the run; a recovery
the certificate does not cover is reviewed and forced as an operator would
(`tenure backend recover --dry-run`, then `--digest`).

Afterwards every key that was acknowledged must have exactly one record (``lost``
counts those that do not), and no job may have started twice (counted from the lines
the processes wrote). Everything started here is stopped again. The last line printed
is one JSON object: {"submitted", "unique_keys", "records", "started", "started_twice",
"lost", "recovery_required", "admit_p50_ms", "admit_p99_ms", "retries",
"forced_recoveries", "seconds"}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.testing import Cluster, seal_once  # noqa: E402
from bench.handoff import _rmtree, cleanup  # noqa: E402
from protocol.client import Client  # noqa: E402
from protocol.errors import TenureError  # noqa: E402

OPEN = ("admitted", "starting", "running")


def config(home: Path) -> str:
    line = f"echo $TENURE_JOB_ID $TENURE_JOB_ATTEMPT >> {home}/starts; sleep 0.05"
    return (f'[stacks.bench.jobs.work]\ncommand = ["/bin/sh", "-c", "{line}"]\n'
            "max_concurrent = 16\nretention = { keep = 1000000 }\n")


def plan_keys(n: int, duplicates: float, seed: int = 7) -> list[str]:
    """``n`` submissions: new keys, and a ``duplicates`` share repeating an earlier one."""
    rng = random.Random(seed)
    keys: list[str] = []
    fresh = 0
    for _ in range(n):
        if keys and rng.random() < duplicates:
            keys.append(rng.choice(keys))
        else:
            keys.append(f"k{fresh:05d}")
            fresh += 1
    return keys


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, int] = field(default_factory=dict)       # key -> job id answered
    latencies: list[float] = field(default_factory=list)
    retries: int = 0
    done: int = 0
    mismatches: list[str] = field(default_factory=list)


def client(sock: str, keys: list[str], tally: Tally, stop: threading.Event,
           pace: float) -> None:
    """Submit ``keys`` in order, ``pace`` seconds apart; retry each with its key until
    answered."""
    c = Client(sock, pin=False, timeout=30.0, connect_timeout=1.0)
    try:
        for key in keys:
            time.sleep(pace)
            while not stop.is_set():
                t = time.monotonic()
                try:
                    r = c.call("job.run", {"template": "bench/work", "key": key})
                except TenureError:
                    with tally.lock:
                        tally.retries += 1
                    c.close()
                    c = Client(sock, pin=False, timeout=30.0, connect_timeout=1.0)
                    time.sleep(0.05)
                    continue
                with tally.lock:
                    tally.latencies.append(time.monotonic() - t)
                    prior = tally.acked.setdefault(key, r["job"]["id"])
                    if prior != r["job"]["id"]:
                        tally.mismatches.append(f"{key}: {prior} and {r['job']['id']}")
                    tally.done += 1
                break
    finally:
        c.close()


def unblock(c: Cluster) -> bool:
    """A recovery the certificate did not cover: review it and perform exactly that."""
    st = c.cli("backend", "status").out
    if not (isinstance(st, dict) and st.get("blocked")):
        return False
    plan = c.cli("backend", "recover", "--dry-run").out
    if isinstance(plan, dict) and plan.get("digest"):
        c.cli("backend", "recover", "--digest", plan["digest"])
        return True
    return False


def backend_up(c: Cluster, not_pid: int | None, timeout: float = 120) -> tuple[int, int]:
    """Wait for a generation (other than ``not_pid``); returns (pid, forced recoveries)."""
    forced = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid = c.backend_pid()
            if pid != not_pid:
                return pid, forced
        except TenureError:
            forced += unblock(c)
        time.sleep(0.1)
    raise RuntimeError("no backend generation came back")


def chaos(c: Cluster, kills: int, upgrades: int, total: int, tally: Tally,
          log: list[str]) -> int:
    """Kills and upgrades, alternating, each when the next share of submissions is
    acknowledged. Returns the forced recoveries."""
    events = ["kill", "upgrade"] * max(kills, upgrades)
    events = [e for i, e in enumerate(events)
              if (e == "kill" and events[:i].count("kill") < kills)
              or (e == "upgrade" and events[:i].count("upgrade") < upgrades)]
    release = c.cli("backend", "status", check=True).out["selector"]["current"]
    forced = 0
    for n, event in enumerate(events):
        while tally.done < total * (n + 1) / (len(events) + 1):
            time.sleep(0.02)
        pid, more = backend_up(c, None)
        forced += more
        log.append(f"{event} at {tally.done} acknowledged")
        if event == "kill":
            os.kill(pid, signal.SIGKILL)
            _, more = backend_up(c, pid)
            forced += more
        else:
            res = c.cli("backend", "upgrade", release, timeout=300).out
            phase = res.get("activation", {}).get("phase") if isinstance(res, dict) else res
            log.append(f"  upgrade: {phase}")
    return forced


def settle(c: Cluster, timeout: float = 300) -> tuple[list[dict[str, Any]], int]:
    """Every record once none is open any more; and the forced recoveries on the way."""
    forced = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            jobs = c.call("job.list", {"limit": 10_000})["jobs"]
            if not any(j["state"] in OPEN for j in jobs):
                return jobs, forced
        except TenureError:
            forced += unblock(c)
        time.sleep(0.2)
    raise RuntimeError("jobs did not settle")


def starts(home: Path) -> Counter[int]:
    path = home / "starts"
    text = path.read_text() if path.exists() else ""
    return Counter(int(line.split()[0]) for line in text.splitlines() if line.strip())


def run(args: argparse.Namespace, home: Path, scratch: Path) -> dict[str, Any]:
    c = Cluster(home, seal_once(scratch))
    try:
        c.up(config(home), timeout=300)
        keys = plan_keys(args.submissions, args.duplicates)
        queues = [keys[i::args.clients] for i in range(args.clients)]
        tally, stop, log = Tally(), threading.Event(), []
        t0 = time.monotonic()
        threads = [threading.Thread(target=client, args=(str(c.layout.api_sock), q, tally,
                                                         stop, args.pace), daemon=True)
                   for q in queues]
        for t in threads:
            t.start()
        forced = chaos(c, args.kills, args.upgrades, len(keys), tally, log)
        for t in threads:
            t.join(600)
        stop.set()
        jobs, more = settle(c)
        seconds = time.monotonic() - t0
        for line in log:
            print(line, flush=True)
        by_key = {j["key"]: j for j in jobs}
        ran = starts(home)
        lost = sum(1 for k, i in tally.acked.items()
                   if k not in by_key or by_key[k]["id"] != i)
        if tally.mismatches:
            print("one key, two ids: " + "; ".join(tally.mismatches[:5]), flush=True)
        uncertain = [j for j in jobs if j["state"] == "recovery_required"]
        lat = sorted(tally.latencies)
        return {"submitted": tally.done, "unique_keys": len(set(keys)), "records": len(jobs),
                "started": len(ran), "started_twice": sum(1 for n in ran.values() if n > 1),
                "lost": lost + len(tally.mismatches),
                "recovery_required": len(uncertain),
                "recovery_required_that_ran": sum(1 for j in uncertain if j["id"] in ran),
                "states": dict(Counter(j["state"] for j in jobs)),
                "admit_p50_ms": round(statistics.median(lat) * 1000, 2),
                "admit_p99_ms": round(lat[int(len(lat) * 0.99) - 1] * 1000, 2),
                "retries": tally.retries, "forced_recoveries": forced + more,
                "seconds": round(seconds, 1)}
    finally:
        cleanup(c)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--submissions", type=int, default=1000)
    ap.add_argument("--duplicates", type=float, default=0.2)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--upgrades", type=int, default=3)
    ap.add_argument("--pace", type=float, default=0.4,
                    help="seconds each client waits between submissions (spreads the run "
                    "so the kills and upgrades fall among the submissions)")
    ap.add_argument("--keep", action="store_true", help="keep the temp home (logs)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    home = Path(tempfile.mkdtemp(prefix="tnj", dir="/tmp"))   # short: socket paths
    os.chmod(home, 0o700)
    scratch = Path(tempfile.mkdtemp(prefix="tnjr", dir="/tmp"))
    try:
        result = run(args, home, scratch)
    finally:
        if args.keep:
            print(f"home kept at {home}", file=sys.stderr)
        else:
            _rmtree(home)
        _rmtree(scratch)
    print(json.dumps(result), flush=True)
    ok = result["started_twice"] == 0 and result["lost"] == 0 \
        and result["records"] == result["unique_keys"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
