"""A loop of a backend generation that fails ends the generation, and the guardian
recovers a new one, with every app keeping its pid. Before, the loop was logged as
stopped and the generation served on: with its observation reader dead (an
OverflowError of the backoff), `status` showed `ready` for an app long gone."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import _rmtree, config, derive_release, install

# the heartbeat loop of this release raises once HOME/fail-a-loop exists
TRIGGER = "fail-a-loop"
HEAD = ("            await asyncio.sleep(HEARTBEAT)\n"
        "            if self.link.state is not LinkState.CONNECTED:\n")
FAULT = ("            await asyncio.sleep(HEARTBEAT)\n"
         f"            if (self.layout.home / {TRIGGER!r}).exists():\n"
         "                raise RuntimeError('injected')\n"
         "            if self.link.state is not LinkState.CONNECTED:\n")


def _inject(text: str) -> str:
    assert text.count(HEAD) == 1, "the heartbeat loop moved: update the injection"
    return text.replace(HEAD, FAULT)


@pytest.fixture(scope="module")
def failing(sealed_release: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("loop-failure")
    derive_release(sealed_release, d / "rel", {"backend/observing.py": _inject})
    yield d / "rel"
    _rmtree(d)


def test_a_failed_loop_ends_the_generation_and_the_guardian_recovers(cluster, failing):
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    rid = install(cluster, failing)
    cluster.cli("backend", "upgrade", rid, check=True)
    pids, first = cluster.pids(), cluster.status()["backend"]
    (cluster.home / TRIGGER).touch()
    cluster.wait(lambda: "exited unexpectedly (status 8)" in cluster.log("guardian"), 30,
                 "the guardian to see the generation end with status 8")
    (cluster.home / TRIGGER).unlink()
    cluster.wait(lambda: cluster.status()["backend"]["pid"] != first["pid"], 60,
                 "a recovered generation")
    log = cluster.backend_log(first["activation"])
    assert "the owner heartbeat loop failed: RuntimeError; this generation ends" in log
    cluster.wait_ready(2)
    assert cluster.pids() == pids
