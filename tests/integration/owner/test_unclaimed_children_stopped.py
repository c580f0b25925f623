"""Regression: the children of a process no launch can claim ran on after the owner's
shutdown. The shutdown listed the owner's unclaimed children once and stopped only that
list; when one of them died its own children were re-parented to the owner, which never
looked again. They ran on under init holding the app's pipes: the applications stage
counted one of two, the logs stage failed (pipes not at end of file), the receipt said
``failed`` and the owner exited 1."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import psutil

from owner.testing import GuardianKey, OwnerProcess, kill_pids

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_owner import Live

# The app forks a process that leaves its group and session and clears its environment
# (no launch can claim it), and that process has a child of its own.
ESCAPES_WITH_CHILD = [
    "sh", "-c",
    "(setsid env -i /bin/sh -c '/bin/sleep 1001 & exec /bin/sleep 1000' &); "
    "echo forked; exec sleep 1000",
]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _escaped_with_child(owner_pid: int) -> list[int]:
    """The owner's unclaimed child ``/bin/sleep 1000`` and its child, once it has one."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for p in psutil.Process(owner_pid).children():
            if p.cmdline() == ["/bin/sleep", "1000"]:
                grand = [c.pid for c in p.children()]
                if grand:
                    return [p.pid, *grand]
        time.sleep(0.02)
    raise AssertionError("the escaped process and its child never showed up")


def test_children_of_unclaimed_processes_are_stopped_at_shutdown(short_home: Path) -> None:
    owner = OwnerProcess(short_home).start()
    pids: list[int] = []
    try:
        lv = Live(owner, GuardianKey())
        r = lv.launch(ESCAPES_WITH_CHILD)
        pids.append(r["pid"])
        assert owner.proc is not None
        pids += _escaped_with_child(owner.proc.pid)
        time.sleep(1.5)   # the owner's descendant tracking had its look
        lv.c.close()
        code = owner.stop()
        rec = json.loads((owner.paths.dir / "owner-receipt.json").read_text())
        assert (code, rec["state"]) == (0, "clean"), (rec, owner.stderr_path.read_text())
        assert [p for p in pids if _alive(p)] == []
        apps = next(s for s in rec["stages"] if s["stage"] == "applications")
        assert apps["detail"] == "1 stopped, 2 unclaimed", apps
        log = owner.stderr_path.read_text()
        assert f"stopped 2 process(es) no launch accounts for: {pids[1]} {pids[2]}" in log, \
            log
    finally:
        kill_pids([p for p in pids if _alive(p)])
