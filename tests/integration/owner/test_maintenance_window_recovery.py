"""`tenure owner upgrade` recovered as the runbook says, with real processes: a window
stopped after ``drained`` by an unclean owner shutdown finishes once `tenure owner
reconcile` proved that owner's launches gone."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_maintenance_window import _interrupted_as_the_owner_stops

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


# ignores SIGTERM: its stop takes the whole stop timeout, then SIGKILL
STUBBORN = """
[stacks.slow.apps.stubborn]
command = ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"]
stop = { timeout = 4 }
"""


def _stopped_after_staged(cluster: Any) -> None:
    """A window whose drain did not finish (the stubborn app outlasts --timeout 1)."""
    cluster.up(DB + STUBBORN)
    cluster.wait_ready(2)
    plan = cluster.cli("owner", "upgrade", "--dry-run", check=True).out
    res = cluster.cli("owner", "upgrade", "--digest", plan["digest"], "--timeout", "1")
    assert res.code == 1 and res.out["error"]["data"]["step"] == "staged", res


def test_continue_after_a_down_at_staged_finishes_the_window(cluster):
    """Was: a `tenure down` after the window stopped at `staged` left `--continue`
    failing with 'no socket at …/api.sock': the drain needed a backend and started
    none, though the runbook said --continue starts the guardian again."""
    _stopped_after_staged(cluster)
    assert cluster.down().code == 0
    done = cluster.cli("owner", "upgrade", "--continue", "--timeout", "60", check=True).out
    assert done["step"] == "done", done
    cluster.wait_ready(2)


def test_continue_after_a_down_and_an_up_at_staged_replaces_that_owner(cluster):
    """Was: after a `tenure down` and a `tenure up` at `staged` (the apps stay stopped),
    `--continue` said the owner's receipt was 'missing', not clean, and `tenure owner
    reconcile` answered ALREADY_RUNNING: the window could never finish."""
    _stopped_after_staged(cluster)
    assert cluster.down().code == 0
    cluster.up()
    between = cluster.cli("owner", "status", check=True).out["owner"]["instance"]
    done = cluster.cli("owner", "upgrade", "--continue", "--timeout", "60", check=True).out
    assert done["step"] == "done", done
    assert done["progress"]["owner"]["instance"] != between
    cluster.wait_ready(2)


def test_a_plan_between_the_owners_of_a_window_points_at_continue(cluster):
    """Was: a --dry-run while the window was between stopping the owner and starting
    the next said `NOT_FOUND: no owner answers on this home; tenure up starts one`, and
    `tenure up` was refused (MAINTENANCE_INCOMPLETE)."""
    cluster.up(DB)
    cluster.wait_ready(1)
    _interrupted_as_the_owner_stops(cluster)
    res = cluster.cli("owner", "upgrade", "--dry-run")
    err = res.out["error"]
    assert res.code == 1 and err["code"] == "MAINTENANCE_INCOMPLETE", res
    assert "tenure owner upgrade --continue" in err["msg"], err
    assert "`tenure up` starts one" not in err["msg"], err
    assert (err["data"]["step"], err["data"]["error"]["code"]) == ("drained", "NOT_FOUND")
    cluster.cli("owner", "upgrade", "--continue", "--timeout", "60", check=True)
    cluster.wait_ready(1)


def test_continue_with_another_release_is_refused_and_does_nothing(cluster):
    """Was: `tenure owner upgrade RELEASE --continue` ignored RELEASE, carried on the
    recorded plan (to another release) and exited 0."""
    _stopped_after_staged(cluster)
    record = cluster.home / "execution" / "maintenance.json"
    planned = _window(cluster)["plan"]["release"]
    kept = record.read_bytes()
    other = "f" * 64
    res = cluster.cli("owner", "upgrade", other, "--continue", "--timeout", "60")
    err = res.out["error"]
    assert res.code == 2 and err["code"] == "BAD_REQUEST", res
    assert planned[:12] in err["msg"] and "nothing was done" in err["msg"], err
    assert record.read_bytes() == kept
    done = cluster.cli("owner", "upgrade", planned[:12], "--continue", "--timeout", "60",
                       check=True).out
    assert done["step"] == "done", done
    cluster.wait_ready(2)
