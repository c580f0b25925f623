"""The owner's shutdown stops every application, whatever its stop policy and whatever
it left behind: a stop policy longer than the owner's own budget is waited for (it was
cut at 60 s, the app left running under init), and processes of an app that no launch
can claim (they left its group and cleared their environment) are stopped too (they
held the app's pipes, failed the shutdown and ran on under init)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import psutil

from owner.testing import GuardianKey, OwnerProcess, kill_pids

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_owner import Live

# The owner's base budget for the applications stage (Owner.stop_timeout, 60 s) made 1 s,
# so that a stop policy longer than it takes seconds, not minutes: the field's default,
# as the dataclass's __init__ holds it (the first of its defaults).
SHORT_BUDGET = ("import owner.daemon as d\n"
                "d.Owner.__init__.__defaults__ = (1.0, *d.Owner.__init__.__defaults__[1:])\n")
IGNORES_TERM = ["sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.1; done"]


def _receipt(owner: OwnerProcess) -> dict:
    return json.loads((owner.paths.dir / "owner-receipt.json").read_text())


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_stop_policy_longer_than_the_owners_budget_is_waited_for(short_home: Path) -> None:
    owner = OwnerProcess(short_home, preload=SHORT_BUDGET).start()
    pids: list[int] = []
    try:
        lv = Live(owner, GuardianKey())
        r = lv.launch(IGNORES_TERM, stop={"signal": "TERM", "timeout": 2.5, "kill_after": 5})
        pids.append(r["pid"])
        assert lv.c.call("status")["stop_budget"] == 7.5   # what `tenure down` waits for
        _said_up(lv, r["instance"])   # its trap is set: a SIGTERM before killed it at once
        lv.c.close()
        t0 = time.monotonic()
        code = owner.stop()
        took = time.monotonic() - t0
        rec = _receipt(owner)
        assert (code, rec["state"]) == (0, "clean"), (rec, owner.stderr_path.read_text())
        assert not _alive(r["pid"])
        assert took >= 2.5, took   # its SIGTERM was ignored: SIGKILL after its timeout
    finally:
        kill_pids([p for p in pids if _alive(p)])


def _said_up(lv: Live, instance: int) -> None:
    deadline = time.monotonic() + 10
    while not lv.c.call("logs.read", {"app": "a", "instance": instance})["records"]:
        assert time.monotonic() < deadline, "the app never said it was up"
        time.sleep(0.02)


# The app forks a process that leaves its group and session and clears its environment:
# no launch can claim it (docs/owner.md), and it keeps the app's stdout open.
ESCAPES = ["sh", "-c", "(setsid env -i /bin/sleep 1000 &); echo forked; exec sleep 1000"]


def _escaped(owner_pid: int) -> list[int]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = [p for p in psutil.Process(owner_pid).children()
                if p.cmdline() == ["/bin/sleep", "1000"]]
        if kids:
            return [p.pid for p in kids]
        time.sleep(0.02)
    raise AssertionError("the escaped process was never re-parented to the owner")


def test_processes_no_launch_can_claim_are_stopped_at_shutdown(short_home: Path) -> None:
    owner = OwnerProcess(short_home).start()
    pids: list[int] = []
    try:
        lv = Live(owner, GuardianKey())
        r = lv.launch(ESCAPES)
        pids.append(r["pid"])
        assert owner.proc is not None
        pids += _escaped(owner.proc.pid)
        lv.c.close()
        code = owner.stop()
        rec = _receipt(owner)
        assert (code, rec["state"]) == (0, "clean"), (rec, owner.stderr_path.read_text())
        assert [p for p in pids if _alive(p)] == []
        log = owner.stderr_path.read_text()
        assert f"stopped 1 process(es) no launch accounts for: {pids[1]}" in log, log
    finally:
        kill_pids([p for p in pids if _alive(p)])
