"""The owner maintenance window's steps are one machine: every (step, event) pair has a
cell, every step but done has its work, only the new owner's start may find it down, and
a window that went back ends done like any other."""

from __future__ import annotations

from backend.cli import ownerwindow, ownerwindow_cli
from backend.cli.ownerwindow import APPS_DOWN, TRANSITIONS, WORK, Event, Step


def test_every_step_and_event_has_a_cell():
    assert set(TRANSITIONS) == {(s, e) for s in Step for e in Event}
    assert set(WORK) == set(Step) - {Step.DONE}


def test_only_the_new_owner_can_end_with_the_owner_down_and_both_go_back():
    """It does not start (stopped), or the backend does not attach to it (started)."""
    down = {s: n for (s, e), n in TRANSITIONS.items() if e is Event.OWNER_DOWN and n}
    assert down == {Step.STOPPED: Step.START_FAILED, Step.STARTED: Step.START_FAILED}


def test_every_path_reaches_done_and_a_revert_rejoins_the_restore():
    def path(step: Step, first: Event) -> list[Step]:
        seen = [step]
        event = first
        while step is not Step.DONE:
            nxt = TRANSITIONS[step, event]
            assert nxt is not None, (step, event)
            step, event = nxt, Event.OK
            seen.append(step)
        return seen
    assert path(Step.PLANNED, Event.OK)[-3:] == [Step.STARTED, Step.RESTORED, Step.DONE]
    assert path(Step.STOPPED, Event.OWNER_DOWN) == [
        Step.STOPPED, Step.START_FAILED, Step.REVERTED, Step.RESTORED, Step.DONE]
    assert path(Step.STARTED, Event.OWNER_DOWN) == [
        Step.STARTED, Step.START_FAILED, Step.REVERTED, Step.RESTORED, Step.DONE]
    assert {Step.START_FAILED, Step.REVERTED} <= APPS_DOWN


PLAN = {"owner": {"instance": "8571c7df", "pid": 24967}, "from": None, "release": None,
        "mode": "standalone", "stop": [], "start": [], "instances": 0,
        "stopped_stacks": [], "digest": "3f5f40d3"}


def _sealed(p: dict) -> dict:
    """``p`` with the digest of its body, as ownerplan.plan makes it."""
    from backend.cli.ownerplan import _digest
    body = {k: v for k, v in p.items() if k != "digest"}
    return {**body, "digest": _digest(body)}


def test_a_plan_made_while_a_window_is_unfinished_says_so():
    text = ownerwindow_cli.plan_text({**PLAN, "unfinished": {"step": "staged",
                                                         "failed": "drained"}}, None)
    assert text.splitlines()[1] == (
        "a maintenance window is unfinished (stopped after step staged): tenure owner "
        "upgrade --continue finishes it; a new window is refused until then")
    assert "unfinished" not in ownerwindow_cli.plan_text({**PLAN, "unfinished": None}, None)


def test_up_while_a_window_runs_names_it_and_is_not_told_to_continue(tmp_path) -> None:
    """`tenure up` while the window's command ran said to run `--continue`, which that
    window's lock would refuse."""
    import fcntl
    import json
    import os

    import pytest

    from backend.cli.ownerwindow import refuse_owner_start
    from protocol.errors import MaintenanceIncomplete, OperationInProgress
    from protocol.layout import MAINTENANCE_KIND, Layout
    lay = Layout(tmp_path)
    lay.execution.mkdir(mode=0o700)
    record = lay.execution / "maintenance.json"
    record.write_text(json.dumps({"kind": MAINTENANCE_KIND, "format": 1, "step": "drained",
                                  "plan": _sealed({**PLAN, "instances": 2}),
                                  "progress": {}}))
    record.chmod(0o600)
    with pytest.raises(MaintenanceIncomplete):   # stopped: --continue finishes it
        refuse_owner_start(lay)
    fd = os.open(lay.execution / "maintenance.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(OperationInProgress) as caught:
            refuse_owner_start(lay)
        assert f"pid {os.getpid()}" in caught.value.msg and "`tenure up` is refused" in \
            caught.value.msg
    finally:
        os.close(fd)


def test_why_an_instance_did_not_come_up_is_read_from_its_starts_answer():
    from backend.cli.ownerwindow import _not_up
    k = "s/a/0"
    assert _not_up(k, {"settled": True, "instances": {k: "ready"}}, 60) is None
    assert _not_up(k, {"settled": True, "instances": {k: "failed"}}, 60) == (
        "s/a/0 did not come up: it failed (`tenure inspect s/a/0` says why)")
    assert _not_up(k, {"settled": False, "instances": {k: "starting"}}, 60) == (
        "s/a/0 did not come up within 60 s (it is starting)")
    assert _not_up(k, {"settled": False, "withdrawn": True, "instances": {k: "stopped"}},
                   60) == "s/a/0 did not come up: a later command stopped it"
    assert "handed over" in _not_up(k, {"settled": False, "handed_over": True}, 60)


def test_a_window_record_with_a_step_that_is_no_step_is_state_corrupt(tmp_path) -> None:
    """A list or a map as the step raised TypeError (unhashable) out of the record's
    reader, which every `tenure up` and owner start asks."""
    import json

    import pytest

    from protocol.errors import StateCorrupt
    from protocol.layout import MAINTENANCE_KIND, Layout
    lay = Layout(tmp_path)
    lay.execution.mkdir(mode=0o700)
    record = lay.execution / "maintenance.json"
    for step in ([], {}, "gone", None):
        record.write_text(json.dumps({"kind": MAINTENANCE_KIND, "format": 1, "step": step,
                                      "plan": {}}))
        record.chmod(0o600)
        with pytest.raises(StateCorrupt, match="no known step"):
            ownerwindow.load(lay)


def test_a_window_record_whose_plan_was_changed_or_is_of_another_shape_is_state_corrupt(
        tmp_path) -> None:
    """The window acts on its plan's lists of instances to stop and start: one edited
    by hand, or left half written by another program, raised KeyError or TypeError
    part-way through `--continue`, after it had stopped or started some."""
    import json

    import pytest

    from protocol.errors import StateCorrupt
    from protocol.layout import MAINTENANCE_KIND, Layout
    lay = Layout(tmp_path)
    lay.execution.mkdir(mode=0o700)
    record = lay.execution / "maintenance.json"
    sound = _sealed({**PLAN, "stop": [["s/a/0"]], "start": [["s/a/0"]], "instances": 1})

    def write(plan: object, progress: object = None) -> None:
        record.write_text(json.dumps({"kind": MAINTENANCE_KIND, "format": 1,
                                      "step": "drained", "plan": plan,
                                      "progress": {} if progress is None else progress}))
        record.chmod(0o600)
    write(sound)
    assert ownerwindow.load(lay)["plan"] == sound
    for plan, progress in [({**sound, "instances": 2}, None),      # its digest is not its
                           (_sealed({**sound, "stop": ["s/a/0"]}), None),
                           (_sealed({**sound, "owner": "8571c7df"}), None),
                           (_sealed({k: v for k, v in sound.items() if k != "start"}), None),
                           (sound, [])]:
        write(plan, progress)
        with pytest.raises(StateCorrupt, match="no plan or progress as a window writes"):
            ownerwindow.load(lay)
