"""Regressions: how a failed `tenure backend upgrade` is said.

- a candidate that exits right after READY ended rolled back with "CONNECT_FAILED:
  cannot connect to …/api.sock: Connection refused"; it says the candidate exited,
  how, and names its log;
- a candidate that fails before READY named `backend-standby-<ns>.log`, a name the
  activation does not lead to; its log is `backend-<activation>.log` once activated;
- a preflight that hangs took two deadlines (the standby's, then a cold preflight's);
- BACKEND_PREFLIGHT_FAILED said only "preflight exited 3", and the guardian's log put
  the failure in phase `created` where docs/upgrade.md names `checked`."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_handoff_support as support
from test_handoff_support import _rmtree, config, derive_release, install

candidates = support.candidates  # the session fixture of derived releases

EXITS_AFTER_READY = """

_start_before_exit = Generation.start


async def _start_then_exit(self):
    await _start_before_exit(self)
    import os
    asyncio.get_running_loop().call_soon(os._exit, 3)   # test candidate: right after READY


Generation.start = _start_then_exit
"""


@pytest.fixture(scope="module")
def broken(sealed_release: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[dict[str, Path]]:
    d = tmp_path_factory.mktemp("said")
    out = {"exits": d / "exits", "hangs": d / "hangs"}
    derive_release(sealed_release, out["exits"],
                   {"backend/generation.py": lambda t: t + EXITS_AFTER_READY})
    derive_release(sealed_release, out["hangs"], {"backend/__main__.py": lambda t: t.replace(
        "from __future__ import annotations\n", "from __future__ import annotations\n"
        "import time\ntime.sleep(3600)   # test candidate: hangs as it is imported\n", 1)})
    yield out
    _rmtree(d)


def test_a_candidate_exiting_right_after_ready_is_said_to_have_exited(cluster, broken):
    cluster.up(config(sleepers=1))
    cluster.wait_ready(1)
    res = cluster.cli("backend", "upgrade", install(cluster, broken["exits"]))
    act = res.out["activation"]
    assert res.code == 1 and act["phase"] == "rolled_back", act
    assert act["code"] == "HANDOFF_FAILED", act
    assert "exited after it reported ready (exit status 3)" in act["error"], act
    log = cluster.layout.logs / f"backend-{act['id']}.log"
    assert act["error"].endswith(f"its log: {log}") and log.exists(), act
    cluster.wait_ready(1)                      # the previous release serves again


def test_a_candidate_crashing_before_ready_names_its_activations_log(cluster, candidates):
    cluster.up(config(sleepers=1))
    act = cluster.cli("backend", "upgrade", install(cluster, candidates.crashes)).out[
        "activation"]
    assert act["phase"] == "rolled_back", act
    log = cluster.layout.logs / f"backend-{act['id']}.log"
    assert f"its log: {log}" in act["error"] and log.exists(), act


def test_a_failing_preflight_says_its_last_words_in_phase_checked(cluster, candidates):
    cluster.up(config(sleepers=1))
    act = cluster.cli("backend", "upgrade", install(cluster, candidates.preflight_fails)
                      ).out["activation"]
    assert act["code"] == "BACKEND_PREFLIGHT_FAILED", act
    assert act["error"] == "preflight exited 3: candidate refuses to run", act
    assert f"handoff {act['id']} failed in phase checked:" in cluster.log("guardian")


def test_a_hanging_preflight_times_out_within_one_deadline(cluster, broken):
    deadline = 6.0
    cluster.env["TENURE_GUARDIAN_DEADLINE"] = f"{deadline:g}"
    cluster.up(config(sleepers=1))
    hangs = install(cluster, broken["hangs"])
    t0 = time.monotonic()
    res = cluster.cli("backend", "upgrade", hangs)
    took = time.monotonic() - t0
    act = res.out["activation"]
    assert act["code"] == "BACKEND_PREFLIGHT_TIMEOUT", act
    assert deadline <= took < deadline * 1.6, took    # not a standby's, then a preflight's
    assert cluster.status()["backend"]["draining"] is False
