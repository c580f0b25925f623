"""A candidate that hangs before READY while its guardian is killed ends by itself.

Was: the guardian killed mid-upgrade (phase retired), `tenure up` restored the previous
release, and the candidate it had activated (a `--standby` process, its parent gone)
ran on forever: through the restore, an owner window and `tenure down`. Real daemons, a
real release whose generation hangs as it starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import (
    _rmtree,
    backend_procs,
    config,
    derive_release,
    guardian_status,
    install,
)

HANGS = """

async def _hang_before_ready(self):
    import asyncio
    await asyncio.sleep(3600)   # test release: never ready


Generation.start = _hang_before_ready
"""


@pytest.fixture(scope="module")
def hangs(sealed_release: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("hangs")
    derive_release(sealed_release, d / "hangs",
                   {"backend/generation.py": lambda t: t + HANGS})
    yield d / "hangs"
    _rmtree(d)


def _phase(cluster) -> str | None:
    last = guardian_status(cluster).get("last_activation") or {}
    return last.get("phase")


def test_a_candidate_hung_before_ready_ends_with_its_guardian(cluster, hangs):
    cluster.up(config(sleepers=1))
    cluster.wait_ready(1)
    pids = cluster.pids()
    rid = install(cluster, hangs)
    guardian = int(guardian_status(cluster)["guardian"]["pid"])
    upgrade = subprocess.Popen(
        [sys.executable, "-m", "backend.cli.main", "--home", str(cluster.home), "backend",
         "upgrade", rid], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        cluster.wait(lambda: _phase(cluster) == "retired", 60, "the candidate activated")
        hung = [p.pid for p in backend_procs(cluster.home)]
        assert hung, "no candidate process"
        os.kill(guardian, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while backend_procs(cluster.home) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert backend_procs(cluster.home) == [], backend_procs(cluster.home)
    finally:
        upgrade.wait(timeout=120)
    cluster.up()                         # a new guardian restores the previous release
    cluster.wait_ready(1)
    assert cluster.pids() == pids
    assert "is gone before it was ready; exiting" in cluster.backend_log(
        next(a["id"] for a in guardian_status(cluster)["recent"]
             if a["release"] == rid))
