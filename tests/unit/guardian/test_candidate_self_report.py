"""A candidate whose own report is wrong after its READY (another epoch than the one it
was started under, or not ready) is a failed handoff: the previous release is restored
under a fresh epoch from the checkpoint, whose own check proves the world. Was: the
activation ended ``uncertain`` with no generation at all, though the owner's identity
and inventory were proven and a restore worked. And a new generation that does not
answer for its first certificate holds the upgrade call a second at most. Fake owner and
generations (guardian.testing): the real coordinator, phase tables, state.db and
receipts."""

from __future__ import annotations

from typing import Any

import pytest

from guardian.handoff import upgrade
from guardian.testing import FakeBackend, FakeCoordinator, run_on

OLD, NEW = "a" * 64, "b" * 64


def _lying(co: FakeCoordinator, how: str) -> None:
    """Make NEW's generation misreport itself in ``generation.status``."""
    real = co.world._api_answer

    def answer(bp: FakeBackend, method: str, params: dict[str, Any]) -> Any:
        out = real(bp, method, params)
        if method == "generation.status" and bp.release == NEW:
            out = {**out, **({"epoch": out["epoch"] + 7} if how == "epoch"
                             else {"ready": False})}
        return out
    co.world._api_answer = answer  # type: ignore[method-assign]


@pytest.mark.parametrize("how", ["epoch", "not ready"])
def test_a_candidate_that_misreports_itself_is_rolled_back_from(tmp_path, how) -> None:
    async def go(co: FakeCoordinator) -> Any:
        await co.connect_owner()
        await co.boot_generation(OLD)
        before = co.world.epoch
        _lying(co, how)
        result = await upgrade(co, NEW)
        return result, before, co.world.epoch, co.world.alive(), co.blocked
    (result, before, epoch, alive, blocked) = run_on(tmp_path, go)
    act = result["activation"]
    assert (act["phase"], act["code"]) == ("rolled_back", "HANDOFF_FAILED"), act
    said = "says it holds epoch" if how == "epoch" else "says it is not ready"
    assert said in act["error"], act["error"]
    assert [g.release for g in alive] == [OLD] and alive[0].epoch == epoch
    assert epoch == before + 2         # the candidate's, then the restore's
    assert blocked is None


def test_the_first_certificate_is_asked_for_within_a_second(tmp_path) -> None:
    """Was: each `generation.certify` call of the `complete` phase waited up to the
    guardian's 30 s deadline, so a new generation that did not answer it held the
    upgrade call for 31 s. The asking takes a second all told (docs/upgrade.md): a call
    that does not answer ends it, ``certified: false``, and the handoff completes."""
    async def go(co: FakeCoordinator) -> Any:
        await co.connect_owner()
        await co.boot_generation(OLD)
        co.world.fail["generation.certify"] = ["hang"]
        co.control_timeouts.clear()
        return await upgrade(co, NEW), co.control_timeouts
    result, timeouts = run_on(tmp_path, go)
    assert result["activation"]["phase"] == "complete"
    assert result["receipts"][-1]["detail"]["certified"] is False
    asked = [t for m, t in timeouts if m == "generation.certify"]
    assert asked == [1.0], timeouts
