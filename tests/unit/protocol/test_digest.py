"""The inventory digest the backend certifies and the guardian checks: app launches
only, in any order; job runs (launch keys ``job:...``) are accounted for by the job
ledger and left out."""

from __future__ import annotations

from protocol.digest import JOB_LAUNCH_PREFIX, inventory_digest

APP = {"launch_key": "s/web/0/1", "pid": 10, "start_ticks": 100}
DB = {"launch_key": "s/db/0/2", "pid": 11, "start_ticks": 110}
JOB = {"launch_key": f"{JOB_LAUNCH_PREFIX}ab12cd34:7:1", "pid": 12, "start_ticks": 120}


def test_the_digest_covers_app_launches_in_any_order() -> None:
    assert inventory_digest([APP, DB]) == inventory_digest([DB, APP])
    assert inventory_digest([APP]) != inventory_digest([APP, DB])
    assert inventory_digest([APP]) != inventory_digest([{**APP, "start_ticks": 101}])
    assert inventory_digest([{**APP, "pid": None}]) == inventory_digest([])


def test_job_runs_are_left_out() -> None:
    assert inventory_digest([APP, JOB]) == inventory_digest([APP])
    assert inventory_digest([JOB]) == inventory_digest([])
