"""What measuring costs: the owner's ``metrics.read`` over many live launches.

    python bench/metrics.py [--apps 1000] [--calls 30]

Starts a fresh owner in a temporary home, launches ``--apps`` idle processes, calls
``metrics.read`` ``--calls`` times (one batched call measures every launch) and prints,
as its last line, one JSON object: ``apps``, ``measure_ms_p50``, ``measure_ms_p95`` and
``isolation`` (cgroup or process-group: which source the owner measured).
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

# Named like nothing in tenure, but keep the import path clean as bench/owner.py does.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

from owner.testing import GuardianKey, OwnerProcess


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def measure(owner: OwnerProcess, apps: int, calls: int) -> dict[str, Any]:
    c = owner.client()
    try:
        epoch = GuardianKey().bootstrap(c, owner.instance)
        for n in range(apps):
            c.call("launch", {"launch_key": f"m{n}", "stack": "bench", "app": "idle",
                              "instance": n, "generation": 1, "argv": ["sleep", "100000"],
                              "env": {"PATH": os.environ["PATH"]},
                              "stop": {"signal": "KILL", "timeout": 5}}, epoch=epoch)
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            got = c.call("metrics.read", timeout=60.0)
            times.append((time.perf_counter() - t) * 1000)
            assert len(got["launches"]) == apps, len(got["launches"])
        return {"apps": apps, "measure_ms_p50": round(percentile(times, 0.5), 2),
                "measure_ms_p95": round(percentile(times, 0.95), 2),
                "isolation": got["isolation"]}
    finally:
        c.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--apps", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=30)
    a = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tbm", dir="/tmp"))
    os.chmod(home, 0o700)
    owner = OwnerProcess(home).start()
    try:
        res = measure(owner, a.apps, a.calls)
    finally:
        owner.stop(signal.SIGTERM, timeout=120)
        shutil.rmtree(home, ignore_errors=True)
    print(f"metrics.read over {res['apps']} launches: p50 {res['measure_ms_p50']} ms, "
          f"p95 {res['measure_ms_p95']} ms ({res['isolation']})")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
