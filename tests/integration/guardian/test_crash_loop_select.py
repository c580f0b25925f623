"""Regression: the streak of failed recovery attempts carried over to a newly selected
release. A crash loop of release B blocked recovery; `tenure release select A`, the
documented way out, started A; A's first crash was then counted on top of B's seven and
blocked at once ("crashed 8 times within 6 s", A having crashed once). Now the streak
counts one release's failures: A's crash is retried with backoff and counted alone.
Recovery timings scaled by 0.1 (TENURE_GUARDIAN_RECOVERY_SCALE, test-only)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_crash_loop import _blocked, release_b  # noqa: F401 (a fixture)
from test_handoff_support import config, install


def test_a_release_selected_after_a_crash_loop_is_not_blocked_for_its_crashes(
        cluster, release_b):  # noqa: F811 (the fixture)
    cluster.env["TENURE_GUARDIAN_RECOVERY_SCALE"] = "0.1"
    cluster.up(config(sleepers=1))
    cluster.wait_ready(1)
    a = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    b = install(cluster, release_b)
    cluster.cli("backend", "upgrade", b, check=True)
    apps = cluster.pids()
    (cluster.home / "crash-b").touch()
    cluster.kill_backend()
    blocked = _blocked(cluster, 60.0)
    assert blocked["reason"].startswith(f"the backend of release {b[:12]} crashed 7 "), \
        blocked

    res = cluster.cli("release", "select", a, timeout=300)
    assert res.code == 0, res
    time.sleep(1)
    crashed = cluster.kill_backend()      # A's first crash, within its stable period
    time.sleep(3)

    st = cluster.cli("backend", "status", timeout=60).out
    assert not st.get("blocked"), st["blocked"]   # was: "crashed 8 times within 6 s"
    cluster.wait(lambda: cluster.backend_pid() != crashed, 60, "A recovered")
    assert cluster.status()["backend"]["release"] == a
    assert cluster.pids() == apps
    log = cluster.log("guardian")
    # the first of B's streak, then the first of A's own
    assert log.count("recovery attempt 1 of 7 failed") == 2, log[-3000:]
