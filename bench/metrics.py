"""What measuring costs: the owner's ``metrics.read`` over many live launches, and a
Prometheus scrape of a whole tenure running as many apps.

    python bench/metrics.py [--apps 1000] [--calls 30] [--no-scrape]

First starts a fresh owner in a temporary home, launches ``--apps`` idle processes and
calls ``metrics.read`` ``--calls`` times (one batched call measures every launch). Then
starts a real tenure (owner, guardian, backend from a freshly sealed release) with
``[metrics] listen`` and ``--apps`` idle instances, and GETs the exposition ``--calls``
times over HTTP (each scrape reads every instance, asks the owner and the guardian, and
renders the text). Prints, as its last line, one JSON object: ``apps``,
``measure_ms_p50``, ``measure_ms_p95``, ``isolation`` (cgroup or process-group: which
source the owner measured), ``scrape_ms_p50``, ``scrape_ms_p95`` and ``scrape_bytes``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

# Named like nothing in tenure, but keep the import path clean as bench/owner.py does.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # backend.testing, with the release sealed from this tree

from backend.testing import Cluster, free_port, seal_once  # noqa: E402
from owner.testing import GuardianKey, OwnerProcess  # noqa: E402


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


def _config(apps: int, port: int) -> str:
    text, left, n = f'[metrics]\nlisten = "127.0.0.1:{port}"\n\n', apps, 0
    while left > 0:
        k = min(left, 50)
        text += (f'[stacks.bench.apps.idle{n}]\ncommand = ["sleep", "infinity"]\n'
                 f"instances = {k}\n\n")
        left, n = left - k, n + 1
    return text


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as r:
        return bytes(r.read())


def scrape(home: Path, scratch: Path, apps: int, calls: int) -> dict[str, Any]:
    """Bring up a tenure with ``apps`` instances and time ``calls`` scrapes."""
    c = Cluster(home, seal_once(scratch))
    port = free_port()
    try:
        t0 = time.monotonic()
        c.up(_config(apps, port), timeout=600)
        c.wait_ready(apps, timeout=600)
        print(f"tenure up: {apps} instances ready in {time.monotonic() - t0:.1f} s",
              flush=True)
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 30
        while True:
            try:
                body = _get(url)  # the listener is bound; also the first, cold scrape
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            body = _get(url)
            times.append((time.perf_counter() - t) * 1000)
        assert body.count(b"tenure_app_up{") == apps, "not every instance was scraped"
        return {"scrape_ms_p50": round(percentile(times, 0.5), 2),
                "scrape_ms_p95": round(percentile(times, 0.95), 2),
                "scrape_bytes": len(body)}
    finally:
        _down(c)


def _down(c: Cluster) -> None:
    try:
        c.down()
    finally:
        deadline = time.monotonic() + 15
        while c.leftovers() and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in c.leftovers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--apps", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--no-scrape", action="store_true", help="measure the owner only")
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
          f"p95 {res['measure_ms_p95']} ms ({res['isolation']})", flush=True)
    if not a.no_scrape:
        home = Path(tempfile.mkdtemp(prefix="tbs", dir="/tmp"))
        scratch = Path(tempfile.mkdtemp(prefix="tbsr", dir="/tmp"))
        os.chmod(home, 0o700)
        try:
            res.update(scrape(home, scratch, a.apps, a.calls))
        finally:
            shutil.rmtree(home, ignore_errors=True)
            shutil.rmtree(scratch, ignore_errors=True)
        print(f"scrape of {res['apps']} instances: p50 {res['scrape_ms_p50']} ms, "
              f"p95 {res['scrape_ms_p95']} ms, {res['scrape_bytes']} bytes")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
