"""bench/owner.py stopped by SIGTERM (bench/suite.py's time cap) cleans up as it does at
its end: the owner it started is gone, with its apps, and so is its temporary home."""

from __future__ import annotations

import glob
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[3]


def homes() -> set[str]:
    return set(glob.glob("/tmp/tbo*"))


@pytest.mark.parametrize("after", [0.5, 0.0], ids=["launching", "owner-starting"])
def test_sigterm_stops_the_owner_and_removes_the_home(after: float) -> None:
    """``owner-starting``: the SIGTERM comes as soon as the owner process exists, before
    its READY (was: its home left behind, on a loaded machine even with 0.5 s)."""
    before = homes()
    bench = subprocess.Popen([sys.executable, str(ROOT / "bench" / "owner.py"), "--spawn",
                              "20", "--lines", "100000", "--idle", "10"], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (homes() - before) or not psutil.Process(bench.pid).children():
            assert time.monotonic() < deadline and bench.poll() is None, "no owner started"
            time.sleep(0.05)
        (home,) = homes() - before
        time.sleep(after)   # launches under way, or the owner still starting
        family = psutil.Process(bench.pid).children(recursive=True)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(120) == 128 + signal.SIGTERM, bench.stderr.read() if bench.stderr \
            else ""
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        if bench.stderr is not None:
            bench.stderr.close()
    assert not Path(home).exists()
    _, alive = psutil.wait_procs(family, timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive
