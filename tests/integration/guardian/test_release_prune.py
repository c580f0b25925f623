"""`tenure release remove` and `tenure release prune` on a running home: installed
releases nothing needs go, what recovery, a rollback or a running daemon needs stays and
is named, and the applications never notice. Real daemons, real releases (derived from
the sealed one), the real command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from backend.testing import force_rmtree

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import derive_release

CONFIG = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n'


@pytest.fixture(scope="module")
def variants(sealed_release: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Any:
    """Three releases that differ from the sealed one by a comment."""
    d = tmp_path_factory.mktemp("variants")
    out = []
    for n in range(3):
        path = d / f"v{n}"
        derive_release(sealed_release, path,
                       {"backend/explain.py": lambda t, n=n: t + f"\n# variant {n}\n"})
        out.append(path)
    yield out
    force_rmtree(d)


def _installed(cluster: Any) -> set[str]:
    return {x["release"] for x in
            cluster.cli("release", "list", check=True).out["releases"]}


def test_prune_and_remove_take_only_what_nothing_needs(cluster: Any, variants: Any) -> None:
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    pids = cluster.pids()
    first = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    ids = [cluster.cli("release", "install", str(p), check=True).out["release"]
           for p in variants]
    releases = cluster.home / "runtime" / "releases"
    assert _installed(cluster) == {first, *ids}

    refused = cluster.cli("release", "remove", first[:10])
    assert refused.code == 1 and refused.out["error"]["code"] == "CONFLICT", refused
    assert refused.out["error"]["msg"].startswith(
        f"release {first[:12]} stays: it is the selected release; "), refused
    assert "the guardian runs it" in refused.out["error"]["data"]["why"]
    bad = cluster.cli("release", "remove", ids[0], "--keep", "2")
    assert bad.code == 2 and bad.out["error"]["code"] == "BAD_REQUEST", bad

    dry = cluster.cli("release", "prune", "--keep", "1", "--dry-run", check=True).out
    assert [x["release"] for x in dry["removed"]] == sorted(ids[:2]) and dry["dry_run"]
    assert _installed(cluster) == {first, *ids}

    text = cluster.cli_text("release", "prune", "--keep", "1")
    assert text.startswith("removed 2 releases ("), text
    assert f"  {ids[2][:12]}  one of the 1 newest installed\n" in text, text
    assert _installed(cluster) == {first, ids[2]}
    assert sorted(os.listdir(releases)) == sorted([first, ids[2]])

    # the upgraded-to release is current, the first one previous: both stay
    up = cluster.cli("backend", "upgrade", ids[2], check=True).out
    assert up["activation"]["outcome"] == "success", up
    kept = cluster.cli("release", "prune", "--keep", "0", check=True).out
    assert kept["removed"] == []
    why = {x["release"]: x["why"] for x in kept["kept"]}
    assert "it is the selected release" in why[ids[2]]
    assert "a backend generation of the guardian runs it" in why[ids[2]]
    assert why[first] == ["it is the previous release (a rollback starts it)",
                          "the guardian runs it", "the guardian's record names it",
                          "the owner's record names it", "a process runs from it"]

    # a removed release can be installed again, and removed by a prefix of its id
    again = cluster.cli("release", "install", str(variants[0]), check=True).out
    assert again["release"] == ids[0]
    gone = cluster.cli("release", "remove", ids[0][:12], check=True).out
    assert [x["release"] for x in gone["removed"]] == [ids[0]]
    assert gone["removed"][0]["bytes"] > 1_000_000
    assert _installed(cluster) == {first, ids[2]}
    assert cluster.pids() == pids
