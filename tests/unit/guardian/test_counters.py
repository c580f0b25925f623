"""Handoff counters in state.db: counted once when a hot handoff ends, with its pause;
never lowered by deleting activations; a database from before them reads as zero."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from guardian.phases import Kind, Outcome, Phase
from guardian.state import StateStore
from protocol.errors import StateCorrupt

HOT = (Phase.CHECKED, Phase.ADMITTED, Phase.DRAINING, Phase.CHECKPOINTED, Phase.FENCED,
       Phase.RETIRED, Phase.STARTED, Phase.VERIFIED)


def _handoff(st: StateStore, clock: list[float], pause_at: Phase | None = None) -> None:
    act = st.create_activation(Kind.UPGRADE, "r2", "r1", 1)
    phase = Phase.CREATED
    for new in HOT:
        clock[0] += 0.3 if new is Phase.STARTED else 0.01
        st.advance(act.id, phase, new)
        phase = new
    st.advance(act.id, phase, Phase.COMPLETE, outcome=str(Outcome.SUCCESS))


def test_a_completed_handoff_counts_once_with_its_pause(tmp_path: Path) -> None:
    clock = [1000.0]
    with mock.patch("guardian.state.time.time", lambda: clock[0]):
        st = StateStore(str(tmp_path / "state.db"))
        _handoff(st, clock)
        aborted = st.create_activation(Kind.UPGRADE, "r3", "r2", 2)
        st.advance(aborted.id, Phase.CREATED, Phase.ABORTED, outcome=str(Outcome.ABORTED))
        check = st.create_activation(Kind.UPGRADE, "r3", "r2", 2)
        st.advance(check.id, Phase.CREATED, Phase.CHECKED)
        st.advance(check.id, Phase.CHECKED, Phase.COMPLETE, outcome=str(Outcome.CHECK_ONLY))
    got = st.counters()
    assert got["handoffs"]["success"] == 1 and got["handoffs"]["aborted"] == 1
    assert "check-only" not in got["handoffs"] and got["handoffs"]["rolled-back"] == 0
    pause = got["pause"]
    assert pause["count"] == 1 and abs(pause["sum"] - 0.33) < 1e-6  # draining → started
    assert dict(pause["buckets"])[0.25] == 0 and dict(pause["buckets"])[0.5] == 1
    st.db.execute("DELETE FROM receipts")
    st.db.execute("DELETE FROM activations")  # pruning history lowers no counter
    assert st.counters() == got
    st.close()


def test_a_state_db_from_before_the_counters_reads_as_zero(tmp_path: Path) -> None:
    st = StateStore(str(tmp_path / "state.db"))
    st.db.execute("DROP TABLE counters")
    st.close()
    st = StateStore(str(tmp_path / "state.db"))  # expanded again at open, same format
    got = st.counters()
    assert set(got["handoffs"].values()) == {0} and got["pause"]["count"] == 0
    st.close()


@pytest.mark.parametrize("value", ["two", b"\x02", -1, float("inf")])
def test_a_damaged_counter_is_state_corrupt_naming_it(tmp_path: Path, value: object) -> None:
    """int('two') raised ValueError: the guardian's metrics answered INTERNAL."""
    st = StateStore(str(tmp_path / "state.db"))
    try:
        st.db.execute("INSERT INTO counters VALUES ('outcome:success', ?)", (value,))
        with pytest.raises(StateCorrupt) as err:
            st.counters()
        assert err.value.msg.startswith("state.db: the counter 'outcome:success' is not a "
                                        "count; a damaged state.db is set aside")
    finally:
        st.close()
