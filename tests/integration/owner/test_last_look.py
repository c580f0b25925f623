"""The last look at an exited leader attributes what it left, even a child caught in the
middle of an exec: ``sh -c 'setsid sleep 1000 & ...'`` exits while its child has left
the group (setsid) and is exec'ing ``sleep``, whose environment (with the launch key)
reads empty for that moment. The exit is taken up only once the child is attributed,
so its descendant row is in owner.db before anything learns of the exit (an owner
crash right after must leave it as evidence for reconcile). Real owner, real processes.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
from pathlib import Path

from owner.testing import GuardianKey, kill_pids

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_owner import Live
from test_receipt_truth import _first_line

LINGER = ["sh", "-c", "setsid sleep 1000 & echo $!; exit 0"]
# a child with no environment at all in a session of its own (settled there before its
# leader exits): never attributable
UNKNOWABLE = ["sh", "-c", "env -i setsid sleep 1000 & echo $!; sleep 0.3; exit 0"]
ROUNDS = 30   # before the fix, about one exit in four was taken up without its child


def _child(lv: Live, instance: int) -> int:
    return int(_first_line(lv, instance))   # the pid the shell printed


def _recorded(db_path: Path, key: str) -> list[int]:
    db = sqlite3.connect(str(db_path))
    try:
        return [r[0] for r in db.execute(
            "SELECT pid FROM descendants WHERE launch_key = ?", (key,))]
    finally:
        db.close()


def _exited(lv: Live, key: str) -> None:
    lv.wait_event(lambda e: e["kind"] == "exit" and e["launch_key"] == key)


def test_a_child_mid_exec_is_recorded_before_its_leaders_exit_is_known(owner):
    lv = Live(owner, GuardianKey())
    kids: list[int] = []
    try:
        for _ in range(ROUNDS):
            r = lv.launch(LINGER)
            _exited(lv, r["launch_key"])
            recorded = _recorded(owner.paths.db, r["launch_key"])
            kids.append(_child(lv, r["instance"]))
            assert recorded == [kids[-1]], (r["launch_key"], recorded, kids[-1])
    finally:
        lv.c.close()
        kill_pids(kids)


def test_a_child_that_never_becomes_attributable_delays_one_exit_only(owner):
    lv = Live(owner, GuardianKey())
    kids: list[int] = []
    try:
        first = lv.launch(UNKNOWABLE)
        _exited(lv, first["launch_key"])      # after the bounded looks, not never
        kids.append(_child(lv, first["instance"]))
        later = lv.launch(LINGER)
        _exited(lv, later["launch_key"])
        kids.append(_child(lv, later["instance"]))
        assert _recorded(owner.paths.db, later["launch_key"]) == [kids[-1]]
    finally:
        lv.c.close()
        kill_pids(kids)
    assert owner.stop(signal.SIGTERM) == 0
    log = owner.stderr_path.read_text() if owner.stderr_path else ""
    warned = [line for line in log.splitlines() if "belong to no launch it can tell" in line]
    assert len(warned) == 1 and first["launch_key"] in warned[0], warned
