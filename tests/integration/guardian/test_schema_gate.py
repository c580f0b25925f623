"""The schema gate with real releases built from modified copies of the tree: a
candidate that cannot read a format on disk is refused in the `checked` phase (also by
`--check`) with the running backend and every app untouched; a release that adds a part
runs, and an older release that does not know the part may still take over (expand
only), while one that knows it at another version may not."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import _rmtree, config, derive_release, install

READS_JOBS_V2 = ('"backend.db:jobs": [JOBS_FORMAT]', '"backend.db:jobs": [2]')


def _with_part(version: int) -> dict:
    """backend/schemas.py and generation.py of a release that adds part `extra`."""
    declare = (f'"checkpoint": [HANDOVER_FORMAT],\n              "backend.db:extra": '
               f'[{version}]}},', f'"checkpoint": HANDOVER_FORMAT,\n               '
               f'"backend.db:extra": {version}}},')
    return {
        "backend/schemas.py": lambda t: t.replace(
            '"checkpoint": [HANDOVER_FORMAT]},', declare[0]).replace(
            '"checkpoint": HANDOVER_FORMAT},', declare[1]),
        "backend/generation.py": lambda t: t + (
            "\n\n_start_before_extra = Generation.start\n\n\n"
            "async def _start_adding_a_part(self):\n"
            "    await _start_before_extra(self)\n"
            f"    self.store.ensure_part('extra', {version}, "
            "'CREATE TABLE extra_rows (x INTEGER)')\n\n\n"
            "Generation.start = _start_adding_a_part\n"),
    }


@dataclass
class Releases:
    reads_jobs_v2: Path
    extra_v1: Path
    extra_v2: Path


@pytest.fixture(scope="module")
def releases(sealed_release: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Releases]:
    d = tmp_path_factory.mktemp("schema-releases")
    out = Releases(d / "jobs2", d / "extra1", d / "extra2")
    derive_release(sealed_release, out.reads_jobs_v2,
                   {"backend/schemas.py": lambda t: t.replace(*READS_JOBS_V2)})
    derive_release(sealed_release, out.extra_v1, _with_part(1))
    derive_release(sealed_release, out.extra_v2, _with_part(2))
    yield out
    _rmtree(d)


def _refusal(res) -> dict:
    act = res.out["activation"]
    assert res.code != 0 and act["code"] == "SCHEMA_INCOMPATIBLE", res
    assert "checked" not in [r["phase"] for r in res.out["receipts"]]
    return act


def test_a_candidate_that_cannot_read_the_state_is_refused_before_the_drain(
        cluster, releases):
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    pids, backend = cluster.pids(), cluster.backend_pid()
    rid = install(cluster, releases.reads_jobs_v2)
    check = cluster.cli("backend", "upgrade", rid, "--check")
    act = _refusal(check)
    assert "backend.db:jobs is at version 1, the candidate reads [2]" in act["error"]
    _refusal(cluster.cli("backend", "upgrade", rid))
    assert cluster.backend_pid() == backend and cluster.pids() == pids
    assert cluster.cli("status").code == 0


def test_parts_are_expand_only_across_upgrades_and_rollbacks(cluster, releases):
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    pids = cluster.pids()
    original = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    v2 = install(cluster, releases.extra_v2)
    v1 = install(cluster, releases.extra_v1)
    up = cluster.cli("backend", "upgrade", v2, timeout=300)
    assert up.ok, up                                    # adds part extra at version 2
    formats = next(r["detail"] for r in up.out["receipts"] if r["phase"] == "checked")
    assert "backend.db:extra" not in formats["formats_on_disk"]
    cluster.wait(lambda: cluster.cli("backend", "status").ok, 30, "the new generation")
    act = _refusal(cluster.cli("backend", "upgrade", v1, timeout=300))   # knows it at 1
    problems = json.dumps(act)
    assert "backend.db:extra" in problems
    back = cluster.cli("backend", "upgrade", original, timeout=300)       # knows no extra
    assert back.ok and back.out["activation"]["phase"] == "complete", back
    assert cluster.pids() == pids
