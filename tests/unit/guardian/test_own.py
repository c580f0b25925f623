"""The guardian's own release record (guardian.own): the table, the strict reader, the
start-up decisions; and the refusals of guardian.selfupgrade over a fake coordinator."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardian import own
from guardian.own import Event, Pointer, Running, State, step
from guardian.phases import Kind
from guardian.selfupgrade import upgrade_guardian
from guardian.testing import FakeCoordinator
from protocol.errors import OperationInProgress, StateCorrupt

A, B, C = "a" * 64, "b" * 64, "c" * 64


def test_every_state_and_event_has_a_cell() -> None:
    assert set(own.TRANSITIONS) == {(s, e) for s in State for e in Event}


def test_an_upgrade_is_a_trial_that_ready_confirms() -> None:
    p = step(Pointer(A), Event.UPGRADE, B)
    assert (p.state, p.release, p.previous) == (State.TRIAL, B, A)
    assert step(p, Event.STARTED_AS) == p                 # the trial itself runs
    assert step(p, Event.READY) == Pointer(B, A)
    assert step(Pointer(), Event.UPGRADE, A) == Pointer(A, None, trial=True)


@pytest.mark.parametrize("event", [Event.STARTED_OTHER, Event.EXEC_FAILED])
def test_a_trial_that_did_not_confirm_goes_back(event: Event) -> None:
    p = step(Pointer(A), Event.UPGRADE, B)
    back = step(p, event, "why")
    assert (back.state, back.release, back.previous) == (State.SELECTED, A, None)
    assert back.reverted is not None
    assert (back.reverted["release"], back.reverted["reason"]) == (B, "why")
    first = step(Pointer(), Event.UPGRADE, B)
    assert step(first, event, "why").state is State.INSTALLED


def test_no_second_upgrade_during_a_trial() -> None:
    with pytest.raises(OperationInProgress):
        step(Pointer(B, A, trial=True), Event.UPGRADE, C)


@pytest.mark.parametrize("p", [Pointer(), Pointer(A), Pointer(B, A)])
@pytest.mark.parametrize("event", [Event.STARTED_AS, Event.STARTED_OTHER, Event.READY,
                                   Event.EXEC_FAILED])
def test_outside_a_trial_starts_and_failures_change_nothing(p: Pointer, event: Event) -> None:
    assert step(p, event, "why") == p


ids = st.one_of(st.none(), st.sampled_from([A, B, C]))


@given(ids, ids, st.booleans(), st.one_of(st.none(), st.dictionaries(
    st.sampled_from(["release", "reason"]), st.text(max_size=5))))
def test_pack_and_unpack_round_trip(release: Any, previous: Any, trial: bool,
                                    reverted: Any) -> None:
    p = Pointer(release, previous, trial and release is not None, reverted)
    assert own.unpack(json.loads(json.dumps(own.pack(p)))) == p


@given(st.dictionaries(st.sampled_from(["release", "previous", "trial", "reverted", "x"]),
                       st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3),
                                 st.sampled_from([A, B]), st.lists(st.integers(), max_size=2),
                                 st.dictionaries(st.text(max_size=2), st.integers(),
                                                 max_size=2))))
def test_unpack_returns_a_valid_record_or_refuses(obj: dict[str, Any]) -> None:
    try:
        p = own.unpack(obj)
    except StateCorrupt:
        return
    assert p.release is None or p.release in (A, B)
    assert isinstance(p.trial, bool) and (not p.trial or p.release is not None)


def _paths(tmp_path: Path) -> Any:
    return SimpleNamespace(guardian_release=str(tmp_path / "guardian-release.json"))


def test_start_goes_back_from_a_trial_another_guardian_finds(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    own.save(paths.guardian_release, Pointer(B, A, trial=True))
    me = Running.start(paths, None)         # the installed code starts: not the trial
    assert (me.record.release, me.follow, me.record.trial) == (A, A, False)
    assert own.load(paths.guardian_release) == me.record
    assert "did not become ready" in me.record.reverted["reason"]   # type: ignore[index]


def test_start_follows_the_selected_release_and_keeps_a_failure(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    own.save(paths.guardian_release, Pointer(A))
    me = Running.start(paths, None)
    assert me.follow == A
    me.exec_failed(paths, StateCorrupt("interpreter gone"))
    assert (me.follow, me.record, me.error["code"]) == (None, Pointer(A), "STATE_CORRUPT")
    assert Running.start(paths, A).follow is None               # already runs it


def test_a_missing_record_is_the_installed_code_and_a_bad_one_refused(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    assert Running.start(paths, None).record == Pointer()
    Path(paths.guardian_release).write_text('{"kind": "tenure-guardian-release", '
                                            '"format": 1, "trial": false, "release": "x"}')
    Path(paths.guardian_release).chmod(0o600)
    with pytest.raises(StateCorrupt, match="release is not a release id"):
        Running.start(paths, None)


def test_the_running_release_is_told_by_where_the_code_lies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert own.running_release(tmp_path) is None            # the code is elsewhere
    tree = Path(own.__file__).resolve().parents[1]
    assert own.running_release(tree.parent) is None          # inside, but not a release id
    releases = tmp_path / "releases"
    module = releases / A / "lib" / "guardian" / "own.py"
    module.parent.mkdir(parents=True)
    module.touch()
    monkeypatch.setattr(own, "__file__", str(module))
    assert own.running_release(releases) == A


def _upgrade(co: FakeCoordinator, release: str) -> Any:
    return asyncio.run(upgrade_guardian(co, release, check=False, stop=lambda: None))


def test_refused_while_an_activation_is_unfinished(tmp_path: Path) -> None:
    co = FakeCoordinator(tmp_path)
    try:
        co.own = Running(None, Pointer())
        act = co.state.create_activation(Kind.UPGRADE, B, A, 1)
        with pytest.raises(OperationInProgress, match=f"activation {act.id}"):
            _upgrade(co, B)
        assert own.load(co.paths.guardian_release) == Pointer()   # nothing recorded
    finally:
        co.state.close()


def test_refused_while_the_last_move_is_unconfirmed(tmp_path: Path) -> None:
    co = FakeCoordinator(tmp_path)
    try:
        co.own = Running(B, Pointer(B, A, trial=True))
        with pytest.raises(OperationInProgress, match="not confirmed yet"):
            _upgrade(co, C)
        assert not Path(co.paths.guardian_release).exists()
    finally:
        co.state.close()
