"""What `tenure owner reconcile` says it proved: one launch is not 'launches'."""

from __future__ import annotations

import pytest

from owner.reconcile_cli import proven_gone


@pytest.mark.parametrize(("n", "said"), [(0, "0 launches proven gone"),
                                         (1, "1 launch proven gone"),
                                         (3, "3 launches proven gone")])
def test_the_count_agrees_with_its_noun(n: int, said: str) -> None:
    assert proven_gone(n) == said


def test_a_drain_of_one_process_says_one_process() -> None:
    from owner.reconcile_cli import _drain_text
    text = _drain_text({"stopped": 1, "gone_already": 0, "killed": [], "joined": [4242]},
                       ["k1"])
    assert text.splitlines()[:2] == [
        "stopped 1 sealed process (0 had exited already)",
        "and 1 process their still running leaders forked since the seal (in the "
        "leader's process group): pid 4242"]


def test_a_drain_of_unrecorded_launches_says_they_are_not_owner_db_s() -> None:
    """`reconciled: 0 launches proven gone` after stopping four launches owner.db (set
    aside: damaged) did not name read as if nothing had been reconciled."""
    from owner.reconcile_cli import _drain_text
    text = _drain_text({"stopped": 4, "gone_already": 0, "killed": [], "joined": [],
                        "unrecorded": 4}, [])
    assert text.splitlines()[-1].startswith(
        "reconciled: 0 launches proven gone in owner.db, and 4 unrecorded launches "
        "stopped above; `tenure up`")


def test_a_plan_prints_no_terminal_control_that_owner_db_holds() -> None:
    """A damaged owner.db row could hide the pid lines the operator approves
    (ESC [8m conceals what follows)."""
    from owner.reconcile_cli import _plan_text
    hide = "\x1b[8m"
    text = _plan_text({"previous": None, "digest": "d", "sockets": [f"/run/x{hide}.sock"],
                       "launches": [{"app": f"s/a{hide}/0", "launch_key": f"k{hide}",
                                     "cgroup": f"/sys/fs/cgroup/t{hide}",
                                     "processes": [{"pid": 4242, "why": "leader"}]}]})
    assert "\x1b" not in text and "pid 4242" in text
    assert "  s/a?[8m/0  k?[8m cgroup /sys/fs/cgroup/t?[8m" in text
