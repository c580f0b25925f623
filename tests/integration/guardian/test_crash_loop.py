"""Regression: a release whose backend reaches READY and exits 1.5 s later, every time, was
recovered for ever with no delay (guardian.log: `exited unexpectedly (status 7)` every
1.5 s, the epoch climbing, never stopping; `tenure release select PREV` refused with
`a backend runs`). A successful start reset the recovery attempts; now only a generation
that stays up for the stable period does, so the crashes back off 1, 2, 4, 8, 16, 30 s
and recovery then blocks, saying why. Real daemons, a real crashing release; the guardian
runs with its recovery timings scaled by 0.1 (TENURE_GUARDIAN_RECOVERY_SCALE, test-only):
waits of 0.1 … 3 s, a stable period of 6 s."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import backend_procs, config, install, with_generation_code

CRASHES = """

_start_and_stay = Generation.start


async def _start_then_crash(self):
    import asyncio
    import os
    await _start_and_stay(self)
    if os.path.exists(self.layout.home / "crash-b"):   # test release: crashes from now on
        asyncio.get_running_loop().call_later(1.5, os._exit, 7)


Generation.start = _start_then_crash
"""


@pytest.fixture(scope="module")
def release_b(sealed_release: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[Path]:
    yield from with_generation_code(sealed_release, tmp_path_factory, "crashes", CRASHES)


def _blocked(cluster, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    res = None
    while time.monotonic() < deadline:
        res = cluster.cli("backend", "status", timeout=60)
        if isinstance(res.out, dict) and res.out.get("blocked"):
            return res.out["blocked"]
        time.sleep(0.5)
    raise AssertionError(f"recovery not blocked in {timeout} s: {res}")


def _on_crashing_b(cluster, release_b: Path) -> tuple[str, str, dict]:
    """A home of one app on release A, upgraded to B, whose generations crash 1.5 s
    after READY from now on: A's id, B's, and the apps' pids."""
    cluster.env["TENURE_GUARDIAN_RECOVERY_SCALE"] = "0.1"
    cluster.up(config(sleepers=1))
    cluster.wait_ready(1)
    a = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    b = install(cluster, release_b)
    cluster.cli("backend", "upgrade", b, check=True)
    apps = cluster.pids()
    (cluster.home / "crash-b").touch()
    return a, b, apps


def test_a_backend_that_crashes_after_every_start_backs_off_and_blocks(cluster, release_b):
    a, b, apps = _on_crashing_b(cluster, release_b)
    t0 = time.monotonic()
    cluster.kill_backend()

    blocked = _blocked(cluster, 60.0)   # the old code never blocked

    took = time.monotonic() - t0
    assert blocked["reason"].startswith(f"the backend of release {b[:12]} crashed 7 times "
                                        "within 6 s of starting: "), blocked
    assert "(exit status 7)" in blocked["reason"], blocked
    assert "`tenure release select`" in blocked["next"], blocked
    log = cluster.log("guardian")
    crashes = log.count("exited unexpectedly (status 7)")
    assert 6 <= crashes <= 7, log[-4000:]
    assert log.count("retrying in") == 6, log[-4000:]
    # the waits alone are 6.1 s; seven attempts of ~1.5 s up and a start each
    assert 6.0 < took < 50.0, took
    assert backend_procs(cluster.home) == []
    assert cluster.pids() == apps                   # the applications ran on

    back = cluster.cli("backend", "rollback", timeout=120)   # no backend to hand over
    act = back.out["activation"]                             # from: it says what does
    assert back.code == 1 and act["code"] == "BACKEND_UNAVAILABLE", back.out
    assert "`tenure release select RELEASE` starts the release you name" in act["error"], act
    res = cluster.cli("release", "select", a, timeout=300)   # the documented way out
    assert res.code == 0, res
    started = res.out["started"]
    assert started is not None and (started["phase"], started["release"]) == \
        ("complete", a), res.out
    assert cluster.status()["backend"]["release"] == a
    assert cluster.pids() == apps


def test_a_release_selected_after_a_crash_loop_is_not_blocked_for_its_crashes(
        cluster, release_b):
    """The streak of failed recovery attempts carried over to a newly selected release:
    A's first crash after `tenure release select A` was counted on top of B's seven
    and blocked at once ("crashed 8 times within 6 s"). The streak counts one
    release's failures: A's crash is retried with backoff and counted alone."""
    a, b, apps = _on_crashing_b(cluster, release_b)
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
