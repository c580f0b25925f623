"""`tenure owner upgrade` to an owner release whose contracts the backend cannot use,
with real processes: its plan is refused, and a window of it stops nothing, since the
backend would never attach to that owner and every app would stay down."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "guardian"))
from test_handoff_support import _rmtree, derive_release, install

DB = '[stacks.demo.apps.db]\ncommand = ["sleep", "infinity"]\n'


@pytest.fixture(scope="module")
def old_contract(sealed_release: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Path]:
    """An owner release that offers stackControl@1 where the backend needs @2."""
    d = tmp_path_factory.mktemp("old-contract")
    derive_release(sealed_release, d / "old", {"owner/service.py": lambda t: t.replace(
        'CAPABILITIES = {"stackControl": 2,', 'CAPABILITIES = {"stackControl": 1,', 1)})
    yield d / "old"
    _rmtree(d)


def _states(cluster: Any) -> dict[str, tuple[str, int | None]]:
    return {k: (a["state"], a["pid"]) for k, a in cluster.apps().items()}


def test_an_owner_release_the_backend_cannot_use_is_refused_and_nothing_stops(
        cluster, old_contract):
    """Was: its plan passed --dry-run, and the window stopped every app, started that
    owner and waited for a backend that never attached, stuck at step started for
    ever (a new window back to the old release refused too)."""
    cluster.up(DB)
    cluster.wait_ready(1)
    rid = install(cluster, old_contract)
    before = _states(cluster)
    res = cluster.cli("owner", "upgrade", rid, "--dry-run")
    err = res.out["error"]
    assert res.code == 1 and err["code"] == "CAPABILITY_MISSING", res
    assert "stackControl@2" in err["msg"] and rid[:12] in err["msg"], err
    assert err["data"]["missing"] == {"stackControl": 2}, err

    # the plan as one reviewed before the check would have had it
    same = cluster.cli("owner", "upgrade", "--dry-run", check=True).out
    body = {k: v for k, v in same.items() if k not in ("digest", "unfinished")}
    body["release"] = rid
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    res = cluster.cli("owner", "upgrade", rid, "--digest", digest, "--timeout", "30")
    err = res.out["error"]
    assert res.code == 1 and err["code"] == "MAINTENANCE_INCOMPLETE", res
    assert err["data"]["step"] == "planned", err
    assert err["data"]["error"]["code"] == "CAPABILITY_MISSING", err
    assert _states(cluster) == before
    owner = cluster.cli("owner", "status", check=True).out
    assert owner["release"]["running"] == same["from"]
