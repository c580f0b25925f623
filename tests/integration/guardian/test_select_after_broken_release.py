"""Regression: docs/recover.md's fix for a selected release whose backend cannot start
("install and select a working one, then `tenure backend recover`") did not work: `tenure
release select` only printed "selected …" and started nothing, and the recover that
followed was blocked ("the certificate was written by another release than the selected
one"), leaving only a forced recovery. Now `select` checks the release it puts in
control as a handoff's `checked` phase would, then starts it from the certificate the
broken release wrote, adopting the applications. Real daemons, a real broken release."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import config, install, with_generation_code

BREAKS = """

_start_unless_broken = Generation.start


async def _start_or_break(self):
    import os
    if os.path.exists(self.layout.home / "break-b"):   # test release: broken from now on
        raise RuntimeError("test release B: cannot start")
    await _start_unless_broken(self)


Generation.start = _start_or_break
"""


@pytest.fixture(scope="module")
def release_b(sealed_release: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[Path]:
    yield from with_generation_code(sealed_release, tmp_path_factory, "breaks", BREAKS)


def _blocked(cluster, timeout: float = 150.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = cluster.cli("backend", "status", timeout=60)
        if isinstance(res.out, dict) and res.out.get("blocked"):
            return res.out
        time.sleep(1.0)
    raise AssertionError(f"recovery not blocked in {timeout} s: {res}")


def test_selecting_a_working_release_starts_it_from_the_broken_ones_certificate(
        cluster, release_b):
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    a = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    b = install(cluster, release_b)
    up = cluster.cli("backend", "upgrade", b, check=True).out
    assert up["receipts"][-1]["detail"]["certified"] is True, up   # B wrote the certificate
    pids = cluster.pids()
    (cluster.home / "break-b").touch()
    os.kill(cluster.backend_pid(), signal.SIGKILL)
    blocked = _blocked(cluster)["blocked"]
    assert "test release B: cannot start" in blocked["reason"], blocked

    res = cluster.cli("release", "select", a, timeout=300)

    assert res.code == 0, res
    started = res.out["started"]
    assert started is not None, res.out          # it used to select and start nothing
    assert res.out["selected"] == a and res.out["checked"]["preflight"], res.out
    assert (started["kind"], started["phase"], started["release"]) == ("recover", "complete",
                                                                       a), started
    assert res.out["blocked"] is None
    st = cluster.status()
    assert st["backend"]["release"] == a
    assert cluster.pids() == pids                  # the applications were adopted
    text = cluster.cli_text("backend", "status")
    assert "BLOCKED" not in text, text
