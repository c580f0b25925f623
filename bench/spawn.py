"""Spawn rate and kill -9 → on_exit latency of the owner's process table.

Usage: python bench/spawn.py [--n 200] [--mode pidfd|sigchld] [--user NAME]
``--user`` starts every app as that user (as root: the identity switch between fork and
exec, owner.runas), to compare with the plain path.
The last line printed is one JSON object:
{"spawn_per_s": ..., "exit_event_p50_us": ..., "exit_event_p99_us": ...}
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import statistics
import time

from owner.procs import (
    ExitMode,
    ExitStatus,
    LaunchSpec,
    ProcessTable,
    Spawned,
    StopPolicy,
    become_subreaper,
)
from owner.runas import RunAs

SPEC = LaunchSpec(argv=("sleep", "1000"), env={"PATH": "/usr/bin:/bin"})


async def bench(n: int, mode: ExitMode | None, spec: LaunchSpec = SPEC) -> dict[str, float]:
    seen: dict[int, int] = {}
    events: dict[int, asyncio.Event] = {}

    def on_exit(key: str, pid: int, status: ExitStatus) -> None:
        seen[pid] = time.perf_counter_ns()
        events[pid].set()

    # As in the owner: a subreaper, whose orphans come back to it.
    become_subreaper()
    table = ProcessTable(on_exit, mode=mode, reap_orphans=True)
    launched: list[Spawned] = []
    try:
        t0 = time.perf_counter()
        for i in range(n):
            sp = table.launch(spec, f"bench-{i}")
            events[sp.pid] = asyncio.Event()
            launched.append(sp)
        spawn_s = time.perf_counter() - t0
        latencies = []
        for sp in launched:
            t = time.perf_counter_ns()
            os.kill(sp.pid, signal.SIGKILL)
            await events[sp.pid].wait()
            latencies.append((seen[sp.pid] - t) / 1000)
    finally:
        for i, sp in enumerate(launched):
            os.close(sp.stdout_fd)
            os.close(sp.stderr_fd)
            await table.stop(f"bench-{i}", StopPolicy(signal=signal.SIGKILL))
        table.close()
    latencies.sort()
    return {
        "spawn_per_s": round(n / spawn_s, 1),
        "exit_event_p50_us": round(statistics.median(latencies), 1),
        "exit_event_p99_us": round(latencies[min(len(latencies) - 1,
                                                 int(len(latencies) * 0.99))], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--mode", choices=[m.value for m in ExitMode], default=None)
    ap.add_argument("--user", default=None, help="start every app as this user")
    args = ap.parse_args()
    mode = ExitMode(args.mode) if args.mode else None
    spec = SPEC if args.user is None else dataclasses.replace(SPEC, run_as=RunAs(args.user))
    result = asyncio.run(bench(args.n, mode, spec))
    print(f"{args.n} apps, exit detection {mode or 'default'}, user {args.user or 'own'}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
