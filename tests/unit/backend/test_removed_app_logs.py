"""The retention round forgets the journal lines of apps the applied config no longer
has once their newest line is ``[retention] removed_app_logs_days`` old: never a
configured app's, never a job template's (they go with their records), never one with a
process (left for a later round, the others still go), nothing while no config is
applied, never with an owner that cannot; one app per call, the owner's list read page
by page, a round bounded in time. The real Generation and retention round over a fake
owner (backend.testing)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from backend.retention import prune_once
from backend.testing import FakeOwner, fake_generation

DAY = 86_400.0
CONFIG = """
[retention]
removed_app_logs_days = {days}

[stacks.s.apps.web]
command = ["sleep", "1000"]
"""


def _round(tmp_path: Path, owner: FakeOwner, days: int = 7,
           capabilities: dict[str, int] | None = None, applied: bool = True
           ) -> tuple[dict[str, Any], dict[str, str]]:
    async def main() -> tuple[dict[str, Any], dict[str, str]]:
        gen = fake_generation(tmp_path, owner, CONFIG.format(days=days))
        assert gen.sup is not None and gen.store is not None
        if applied:
            with gen.store.tx() as db:
                gen.store.set_config(db, CONFIG.format(days=days), "unit.toml",
                                     gen.config.revision)
        gen.sup.owner_capabilities = {"logApps": 1} if capabilities is None else capabilities
        try:
            missed: dict[str, str] = {}
            return await prune_once(gen, missed), missed
        finally:
            await gen.close()
    return asyncio.run(main())


def test_only_removed_apps_whose_newest_line_is_old_enough_go(tmp_path: Path) -> None:
    owner, now = FakeOwner(), time.time()
    owner.journal_apps = {("s", "web"): now - 30 * DAY,        # configured: stays
                          ("s", "old"): now - 8 * DAY,         # removed 8 days ago
                          ("t", "web"): now - 9 * DAY,         # another stack's web
                          ("s", "recent"): now - 6 * DAY,      # removed 6 days ago: stays
                          ("s", "job:migrate"): now - 30 * DAY,  # a template's output
                          ("s", "emptied"): None}              # no line left to date it
    done, missed = _round(tmp_path, owner)
    assert (done["log_apps"], done["log_lines"], missed) == (3, 30, {})
    assert set(owner.journal_apps) == {("s", "web"), ("s", "recent"), ("s", "job:migrate")}
    assert [e for m, _, e in owner.calls if m == "logs.forget_apps"] == [owner.epoch] * 3


def test_zero_days_forgets_at_the_next_round(tmp_path: Path) -> None:
    owner = FakeOwner()
    owner.journal_apps = {("s", "gone"): time.time() - 1}
    done, _ = _round(tmp_path, owner, days=0)
    assert done["log_apps"] == 1 and owner.journal_apps == {}


def test_an_app_with_a_process_stays_and_the_others_go(tmp_path: Path) -> None:
    owner, then = FakeOwner(), time.time() - 10 * DAY
    owner.journal_apps = {("s", "a"): then, ("s", "busy"): then, ("s", "c"): then}
    owner.live["k1"] = {"stack": "s", "app": "busy", "launch_key": "k1"}
    done, missed = _round(tmp_path, owner)
    assert (done["log_apps"], missed) == (2, {})
    assert set(owner.journal_apps) == {("s", "busy")}
    assert [[a["app"] for a in p["apps"]] for p in owner.sent("logs.forget_apps")] \
        == [["a"], ["busy"], ["c"]]                      # one app per call


def test_nothing_goes_while_no_config_is_applied(tmp_path: Path) -> None:
    """A generation with no applied config (none yet, or backend.db set aside) would
    take every app for removed."""
    owner = FakeOwner()
    owner.journal_apps = {("s", "web"): 0.0, ("q", "quiet"): 0.0}
    done, missed = _round(tmp_path, owner, days=0, applied=False)
    assert (done["log_apps"], missed) == (0, {})
    assert len(owner.journal_apps) == 2 and owner.sent("logs.apps") == []


def test_the_owners_list_is_read_page_by_page(tmp_path: Path) -> None:
    owner = FakeOwner()
    owner.apps_page = 2
    owner.journal_apps = {("s", f"gone{i}"): 0.0 for i in range(5)}
    owner.journal_apps[("s", "web")] = 0.0
    done, _ = _round(tmp_path, owner)
    assert done["log_apps"] == 5 and set(owner.journal_apps) == {("s", "web")}
    assert owner.sent("logs.apps") == [
        {}, {"after_stack": "s", "after_app": "gone1"},
        {"after_stack": "s", "after_app": "gone3"}]


def test_a_round_stops_forgetting_when_its_time_is_up(tmp_path: Path,
                                                      monkeypatch: Any) -> None:
    from backend import retention
    monkeypatch.setattr(retention, "FORGET_BUDGET_S", 0.0)
    owner = FakeOwner()
    owner.journal_apps = {("s", f"gone{i}"): 0.0 for i in range(3)}
    done, _ = _round(tmp_path, owner)
    assert (done["log_apps"], done["log_apps_left"]) == (0, 3)
    assert len(owner.journal_apps) == 3


def test_an_owner_without_the_capability_is_not_asked(tmp_path: Path) -> None:
    owner = FakeOwner()
    owner.journal_apps = {("s", "gone"): 0.0}
    done, missed = _round(tmp_path, owner, capabilities={})
    assert "log_apps" not in done and missed == {}
    assert owner.sent("logs.apps") == [] and owner.journal_apps == {("s", "gone"): 0.0}


def test_an_app_put_back_while_the_round_runs_keeps_its_lines(tmp_path: Path) -> None:
    """The round lists the removed apps once and forgets them one call after another
    (a minute, on large journals). Was: an apply that put one of them back meanwhile,
    stopped or not started yet, lost its lines all the same."""
    from backend.config import parse_config
    owner, then = FakeOwner(), time.time() - 10 * DAY
    owner.journal_apps = {("s", "a"): then, ("s", "b"): then}
    back = CONFIG.format(days=7) + '[stacks.s.apps.b]\ncommand = ["sleep", "1000"]\n'

    async def main() -> dict[str, Any]:
        gen = fake_generation(tmp_path, owner, CONFIG.format(days=7))
        assert gen.sup is not None and gen.store is not None
        with gen.store.tx() as db:
            gen.store.set_config(db, CONFIG.format(days=7), "unit.toml", gen.config.revision)
        gen.sup.owner_capabilities = {"logApps": 1}

        def apply_meanwhile(method: str, params: dict[str, Any]) -> None:
            if method == "logs.forget_apps" and params["apps"][0]["app"] == "a":
                gen.config = parse_config(back, "unit.toml")   # admitted as `a` goes
        owner.before = apply_meanwhile
        try:
            return await prune_once(gen, {})
        finally:
            await gen.close()
    done = asyncio.run(main())
    assert done["log_apps"] == 1 and set(owner.journal_apps) == {("s", "b")}
    assert [[a["app"] for a in p["apps"]] for p in owner.sent("logs.forget_apps")] == [["a"]]
