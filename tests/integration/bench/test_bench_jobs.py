"""bench/jobs.py end to end with small counts: keyed submissions from concurrent
clients through a backend SIGKILL and a handoff; its JSON line reports no job started
twice, none lost, one record per key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_bench_jobs_small_run_reports_no_duplicate_and_no_loss() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "jobs.py"), "--submissions", "60",
         "--clients", "4", "--kills", "1", "--upgrades", "1", "--pace", "0.05"],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["submitted"] == 60 and out["records"] == out["unique_keys"] < 60
    assert (out["started_twice"], out["lost"]) == (0, 0)
    assert out["started"] + out["recovery_required"] == out["records"]
    assert out["recovery_required_that_ran"] == 0
    assert out["admit_p50_ms"] > 0
    assert "kill at" in proc.stdout and "upgrade: complete" in proc.stdout
