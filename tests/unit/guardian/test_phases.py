"""The activation tables: complete for every kind, and the endings the issue promises."""

from __future__ import annotations

import pytest

from guardian.phases import (
    FINAL,
    FLOWS,
    Kind,
    Outcome,
    Phase,
    allowed,
    ending,
    outcome_of,
    reaching,
)

HOT_BEFORE_FENCE = [Phase.CREATED, Phase.CHECKED, Phase.ADMITTED, Phase.DRAINING,
                    Phase.CHECKPOINTED]
AFTER_FENCE = [Phase.FENCED, Phase.RETIRED, Phase.STARTED, Phase.VERIFIED]


@pytest.mark.parametrize("kind", list(Kind))
def test_every_open_phase_has_a_failure_ending_it_may_move_to(kind: Kind) -> None:
    flow = FLOWS[kind]
    for phase in flow.next:
        if phase in FINAL:
            assert flow.next[phase] == frozenset()
            continue
        end = ending(kind, phase)
        assert end in FINAL and end is not Phase.COMPLETE
        assert allowed(kind, phase, end) and allowed(kind, phase, Phase.UNCERTAIN)
        outcome_of(end)  # every ending has an outcome


def test_hot_handoffs_abort_before_the_fence_and_roll_back_after_it() -> None:
    for kind in (Kind.UPGRADE, Kind.ROLLBACK):
        assert [ending(kind, p) for p in HOT_BEFORE_FENCE] == [Phase.ABORTED] * 5
        assert [ending(kind, p) for p in AFTER_FENCE] == [Phase.ROLLED_BACK] * 4


def test_cold_starts_fail_after_the_fence_and_a_failed_restore_is_uncertain() -> None:
    for kind in (Kind.START, Kind.RECOVER):
        assert ending(kind, Phase.CREATED) is Phase.ABORTED
        assert ending(kind, Phase.STARTED) is Phase.FAILED
    assert ending(Kind.RESTORE, Phase.FENCED) is Phase.UNCERTAIN
    assert allowed(Kind.RECOVER, Phase.CREATED, Phase.BLOCKED)
    assert not allowed(Kind.START, Phase.CREATED, Phase.BLOCKED)
    assert not allowed(Kind.UPGRADE, Phase.CREATED, Phase.FENCED)
    assert not allowed(Kind.START, Phase.FENCED, Phase.RETIRED)


def test_stored_values_never_change() -> None:
    assert [k.value for k in Kind] == ["start", "upgrade", "rollback", "recover", "restore"]
    assert Outcome.ROLLED_BACK.value == "rolled-back" and Phase.ROLLED_BACK.value == \
        "rolled_back"
    assert {outcome_of(p).value for p in FINAL - {Phase.COMPLETE}} == {
        "aborted", "rolled-back", "failed", "uncertain", "blocked"}


def test_a_failure_is_said_to_be_in_the_phase_whose_work_failed() -> None:
    """Regression: a failed preflight was logged "failed in phase created" where
    docs/upgrade.md puts it in ``checked``: the phase being worked towards."""
    assert reaching(Kind.UPGRADE, Phase.CREATED) is Phase.CHECKED
    assert reaching(Kind.UPGRADE, Phase.RETIRED) is Phase.STARTED
    assert reaching(Kind.RECOVER, Phase.CREATED) is Phase.FENCED
    assert reaching(Kind.UPGRADE, Phase.COMPLETE) is Phase.COMPLETE
    assert reaching(Kind.UPGRADE, Phase.ABORTED) is Phase.ABORTED
