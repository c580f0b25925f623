"""`tenure owner upgrade` recovered as the runbook says, with real processes: a window
stopped after ``drained`` by an unclean owner shutdown finishes once `tenure owner
reconcile` proved that owner's launches gone."""

from __future__ import annotations

import json
from typing import Any

DB = '[stacks.demo.apps.db]\ncommand = ["sleep", "infinity"]\n'


def _window(cluster: Any) -> dict[str, Any]:
    rec: dict[str, Any] = json.loads((cluster.home / "execution" / "maintenance.json"
                                      ).read_text())
    return rec


def test_continue_after_reconcile_of_an_unclean_owner_stop_finishes_the_window(cluster):
    """Was: after `drained` with a failed shutdown receipt, `tenure owner reconcile`
    wrote its acknowledgement but `--continue` read only the receipt and said 'failed,
    not clean' for ever, with every app down and `tenure up` refused."""
    cluster.env = {"TENURE_OWNER_FAULT": "logs"}   # test-only: the logs stage fails
    cluster.up(DB)
    cluster.wait_ready(1)
    cluster.env = {}
    plan = cluster.cli("owner", "upgrade", "--dry-run", check=True).out
    res = cluster.cli("owner", "upgrade", "--digest", plan["digest"], "--timeout", "30")
    err = res.out["error"]
    assert res.code == 1 and err["data"]["step"] == "drained", res
    assert err["data"]["error"]["code"] == "RECONCILE_REQUIRED", err
    assert cluster.cli("owner", "reconcile").code == 0
    done = cluster.cli("owner", "upgrade", "--continue", "--timeout", "30", check=True).out
    assert done["step"] == "done", done
    assert _window(cluster)["outcome"] == "completed"
    cluster.wait_ready(1)
    assert cluster.apps()["demo/db/0"]["state"] == "ready"

