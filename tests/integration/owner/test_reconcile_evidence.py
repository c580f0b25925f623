"""The evidence a guided reconcile seals is complete and still true when it drains: a
child that outlived its exited leader, a process found only in its launch's cgroup, and
leftover sockets that changed since the seal. Real owners, SIGKILLed; real kills.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from owner.cgroups import cgroup_name, members
from owner.testing import GuardianKey, OwnerProcess
from protocol.procfs import group_members, kill_verified, running, start_ticks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_owner import Live
from test_receipt_truth import _crash_leaving_a_lingering_child, _wait_gone


def _guided(owner: OwnerProcess, *args: str) -> tuple[int, dict[str, Any]]:
    res = owner.run_exit("reconcile", *args, "--json")
    return res.returncode, json.loads(res.stdout)


def _gone(pid: int, ticks: int | None) -> bool:
    return ticks is None or not running(pid, ticks)


def _kill(procs: dict[int, int | None]) -> None:
    """SIGKILL what is left of ``procs`` (pid -> start ticks), never a reused pid."""
    for pid, ticks in procs.items():
        if ticks is not None:
            kill_verified(pid, ticks, signal.SIGKILL)
    _wait_gone(list(procs))


def test_guided_reconcile_stops_a_lingering_child_of_an_exited_launch(owner):
    child, _ = _crash_leaving_a_lingering_child(owner)
    ticks = start_ticks(child)
    try:
        text = owner.run_exit("reconcile", "--prepare").stdout
        assert "k1 (leader exited)" in text and f"pid {child}  (tracked descendant)" in text
        code, plan = _guided(owner, "--prepare")
        assert code == 0, plan
        (launch,) = plan["launches"]
        assert (launch["launch_key"], launch["state"]) == ("k1", "exited")
        assert [(p["pid"], p["why"]) for p in launch["processes"]] == \
            [(child, "tracked descendant")]
        code, done = _guided(owner, "--drain", plan["digest"])
        assert code == 0, done
        assert done["stopped"] == 1 and done["proven_gone"] == ["k1"]
        assert _gone(child, ticks)
    finally:
        _kill({child: ticks})
    owner.start()
    with owner.client() as c:
        assert c.call("inventory")["launches"] == []


def test_drain_refuses_when_the_leftover_sockets_changed(owner):
    child, _ = _crash_leaving_a_lingering_child(owner)
    ticks = start_ticks(child)
    try:
        code, plan = _guided(owner, "--prepare")
        assert code == 0 and owner.paths.sock in plan["sockets"], plan
        os.unlink(owner.paths.sock)         # as if another owner had bound it since
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(owner.paths.sock)
        code, refused = _guided(owner, "--drain", plan["digest"])
        assert code == 2 and refused["code"] == "CONFLICT", refused
        assert "sockets changed" in refused["msg"] and running(child, ticks)
        code, plan = _guided(owner, "--prepare")
        code, done = _guided(owner, "--drain", plan["digest"])
        assert code == 0 and done["stopped"] == 1, done
    finally:
        _kill({child: ticks})


LOOP = ["sh", "-c", "while :; do sleep 0.3; done"]
"""A launch that forks short-lived children, as the demo worker does: by the time of a
drain the child the seal named is gone and another runs."""


def _outsider(owner: OwnerProcess, key: str) -> subprocess.Popen[bytes]:
    """A process that joins a launch from outside after the seal: its launch key and this
    home in its environment, but its own session and group, and no sealed parent."""
    env = {**os.environ, "TENURE_LAUNCH_KEY": key, "TENURE_OWNER_HOME": owner.paths.home_marker}
    return subprocess.Popen(["sleep", "1000"], env=env, start_new_session=True)


def _forked_since(leader: int, sealed: set[int]) -> set[int]:
    """Members of ``leader``'s group the seal did not name (the loop may be between two
    children for a moment)."""
    deadline = time.monotonic() + 5
    while not (newer := set(group_members(leader)) - sealed) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert newer, "the loop forked no child since the seal"
    return newer


def test_drain_stops_what_a_sealed_leader_forked_since_the_seal(owner):
    """The guided reconcile of a launch that forks short-lived children: after a review
    of a few seconds the drain finds children the seal did not name. Those in the process
    group of the sealed leader, still running as sealed, are the launch's and are stopped
    with it; the drain's reconcile then proves the launch gone. A process that joins from
    outside the launch is still refused, and nothing is stopped then."""
    lv = Live(owner, GuardianKey())
    leader = lv.launch(LOOP)["pid"]
    seen: dict[int, int | None] = {leader: start_ticks(leader)}
    try:
        _crash(owner, lv)
        code, plan = _guided(owner, "--prepare")
        assert code == 0, plan
        (launch,) = plan["launches"]
        sealed = {p["pid"]: p["start_ticks"] for p in launch["processes"]}
        assert sealed[leader] == seen[leader] and launch["pgid"] == leader, plan
        time.sleep(2.5)                                   # the operator reviews the plan
        newer = _forked_since(leader, set(sealed))
        seen |= {p: start_ticks(p) for p in {*sealed, *newer}}

        outsider = _outsider(owner, launch["launch_key"])
        try:
            code, refused = _guided(owner, "--drain", plan["digest"])
            assert code == 2 and refused["code"] == "CONFLICT", refused
            assert refused["data"]["new_pids"] == [outsider.pid], refused
            assert running(leader, sealed[leader])        # nothing was stopped
        finally:
            outsider.kill()
            outsider.wait()

        time.sleep(1.0)                                   # and the loop forks again
        code, done = _guided(owner, "--drain", plan["digest"])
        assert code == 0, done
        assert done["proven_gone"] == [launch["launch_key"]], done
        assert not group_members(leader, include_session=True)
        assert all(_gone(p, t) for p, t in seen.items())
    finally:
        owner.stop(signal.SIGKILL)
        _kill({**seen, **{p: start_ticks(p) for p in group_members(leader)}})


# The owner of a cgroup test runs in a scratch cgroup of this host's cgroup2 mount, which
# it takes for a delegated one (the system test covers real delegation under systemd).
CGROUP_OWNER = """
import os, pathlib
from owner import cgroups, daemon
pathlib.Path({scratch!r}, "cgroup.procs").write_text(str(os.getpid()))
daemon.setup_cgroups = lambda: cgroups.setup(pathlib.Path({mount!r}))
"""

ESCAPE = "env -i setsid sleep 1000 &"


def _cgroup_owner(home: Path, scratch: Path) -> OwnerProcess:
    return OwnerProcess(home, preload=CGROUP_OWNER.format(scratch=str(scratch),
                                                          mount=str(scratch.parent))).start()


def _wait_members(path: Path, n: int) -> list[int]:
    deadline = time.monotonic() + 10
    while len(members(path)) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return members(path)


def _crash(owner: OwnerProcess, lv: Live) -> None:
    lv.c.close()
    assert owner.stop(signal.SIGKILL) == -9


def test_cgroup_members_are_sealed_and_drained_without_a_pid_to_find_them(short_home,
                                                                          scratch):
    """Children that cleared their environment and left the session are found through
    the cgroup recorded at launch alone: k1's leader ends after the owner crashed, k2's
    before (its row says exited)."""
    owner = _cgroup_owner(short_home, scratch)
    apps = scratch / "apps"
    everything: dict[int, int | None] = {}
    try:
        lv = Live(owner, GuardianKey())
        assert lv.c.call("status")["isolation"] == "cgroup"
        leaders = [lv.launch(["sh", "-c", f"{ESCAPE} {end}"])["pid"]
                   for end in ("sleep 3", "exit 0")]
        lv.wait_event(lambda e: e["kind"] == "exit" and e["launch_key"] == "k2")
        escaped = {k: next(p for p in _wait_members(apps / cgroup_name(k), n)
                           if p not in leaders) for k, n in (("k1", 2), ("k2", 1))}
        everything = {p: start_ticks(p) for k in ("k1", "k2")
                      for p in members(apps / cgroup_name(k))}
        _crash(owner, lv)
        deadline = time.monotonic() + 10     # k1's leader ends after the crash
        while running(leaders[0], everything[leaders[0]] or 0) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        code, plan = _guided(owner, "--prepare")
        assert code == 0, plan
        sealed = {ln["launch_key"]: {p["pid"]: p["why"] for p in ln["processes"]}
                  for ln in plan["launches"]}
        assert sealed == {"k1": {escaped["k1"]: "cgroup member"},
                          "k2": {escaped["k2"]: "cgroup member"}}
        code, done = _guided(owner, "--drain", plan["digest"])
        assert code == 0, done
        assert (done["stopped"], sorted(done["proven_gone"])) == (2, ["k1", "k2"])
        assert all(_gone(p, t) for p, t in everything.items())
    finally:
        owner.stop(signal.SIGKILL)
        _kill(everything)
    again = _cgroup_owner(short_home, scratch)
    assert again.stop() == 0, again.stderr_path.read_text() if again.stderr_path else ""


def test_drain_reports_a_refused_cgroup_kill_and_still_proves_the_launch_gone(short_home,
                                                                              scratch):
    """A threaded cgroup refuses cgroup.kill (EOPNOTSUPP): the drain says so, kills the
    sealed processes one by one and reconciles; nothing escapes as a traceback."""
    owner = _cgroup_owner(short_home, scratch)
    path = scratch / "apps" / cgroup_name("k1")
    path.mkdir()                             # reused by the launch, as a leftover would be
    (path / "cgroup.type").write_text("threaded")
    leader: dict[int, int | None] = {}
    try:
        lv = Live(owner, GuardianKey())
        pid = lv.launch(["sleep", "1000"])["pid"]
        leader = {pid: start_ticks(pid)}
        _crash(owner, lv)
        code, plan = _guided(owner, "--prepare")
        assert code == 0 and plan["launches"][0]["cgroup"] == str(path), plan
        code, done = _guided(owner, "--drain", plan["digest"])
        assert code == 0, done
        assert [(f["launch_key"], f["errno"]) for f in done["cgroup_kill_failed"]] == \
            [("k1", errno.errorcode[errno.EOPNOTSUPP])]
        assert done["stopped"] == 1 and done["proven_gone"] == ["k1"]
        assert _gone(pid, leader[pid])
    finally:
        owner.stop(signal.SIGKILL)
        _kill(leader)


def test_retention_keeps_an_ended_launch_whose_cgroup_still_holds_a_process(short_home,
                                                                            scratch):
    """The row of an exited launch is the evidence a reconcile needs while something of
    it runs in its cgroup: ``launches.prune`` keeps it, however old it is."""
    owner = _cgroup_owner(short_home, scratch)
    escaped: dict[int, int | None] = {}
    lv = Live(owner, GuardianKey())
    try:
        leader = lv.launch(["sh", "-c", f"{ESCAPE} exit 0"])["pid"]
        lv.wait_event(lambda e: e["kind"] == "exit" and e["launch_key"] == "k1")
        escaped = {p: start_ticks(p) for p in _wait_members(scratch / "apps" /
                                                             cgroup_name("k1"), 1)
                   if p != leader}
        assert escaped
        for _ in range(100):                       # 100 newer ended launches
            lv.launch(["true"])
        _wait_exits(lv, {f"k{i}" for i in range(2, 102)})
        assert lv.call("launches.prune", {"keep": 100}) == {"deleted": 0}
    finally:
        lv.c.close()
        owner.stop(signal.SIGKILL)
        _kill(escaped)


def _wait_exits(lv: Live, keys: set[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if keys <= {e["launch_key"] for e in lv.events() if e["kind"] == "exit"}:
            return
        time.sleep(0.05)
    raise AssertionError("not every launch exited")
