"""What the owner reports about processes is true: a stop or signal of one launch never
reaches another, and a stop reports ``stopped`` only when everything of the launch is gone.
A real owner, its socket and real processes."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from owner.testing import DISK_FULL, GuardianKey, OwnerProcess
from protocol.errors import NotFound, StorageFailed
from protocol.procfs import children, read_stat, start_ticks

NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"
STOP = {"signal": "TERM", "timeout": 5, "kill_after": 5}


class Live:
    """A running owner with a fenced client: ``call`` passes the current epoch."""

    def __init__(self, owner: OwnerProcess) -> None:
        self.owner = owner
        self.c = owner.client()
        self.epoch = GuardianKey().bootstrap(self.c, owner.instance)
        self.n = 0

    def call(self, m: str, p: dict[str, Any] | None = None) -> Any:
        return self.c.call(m, p or {}, epoch=self.epoch)

    def launch(self, argv: list[str], key: str | None = None) -> Any:
        self.n += 1
        p = {"launch_key": key or f"k{self.n}", "stack": "s", "app": "a",
             "instance": self.n, "generation": 1, "argv": argv,
             "env": {"PATH": os.environ["PATH"]}, "stop": STOP}
        return self.call("launch", p)

    def first_line(self, launch: dict[str, Any], timeout: float = 10.0) -> str:
        """The first line launch ``launch`` wrote to its stdout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            recs = self.c.call("logs.read", {"app": "a", "instance": launch["instance"],
                                             "stream": "stdout"})["records"]
            if recs:
                return recs[0]["data"].decode()  # type: ignore[no-any-return]
            time.sleep(0.02)
        raise AssertionError(f"{launch['launch_key']} wrote nothing")

    def wait_exit(self, key: str, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.c.call("observations.read", {"after": 0})["events"]:
                if e["kind"] == "exit" and e["launch_key"] == key:
                    return e  # type: ignore[no-any-return]
            time.sleep(0.02)
        raise AssertionError(f"no exit event for {key}")


@pytest.fixture
def live(short_home: Path) -> Iterator[Live]:
    owner = OwnerProcess(short_home).start()
    lv = Live(owner)
    try:
        yield lv
    finally:
        lv.c.close()
        assert owner.stop() == 0


def _can_steer_pids() -> bool:
    return os.geteuid() == 0 and os.access(NS_LAST_PID, os.W_OK)


def _launch_on_pid(live: Live, pid: int, argv: list[str], attempts: int = 200) -> Any:
    """Launch ``argv`` so that it gets ``pid`` (writing ``pid - 1`` to ns_last_pid right
    before). Other processes on the machine may take the number first: retry."""
    for _ in range(attempts):
        with open(NS_LAST_PID, "w") as f:
            f.write(str(pid - 1))
        r = live.launch(argv)
        if r["pid"] == pid:
            return r
        live.call("stop", {"launch_key": r["launch_key"]})
    pytest.fail(f"pid {pid} could not be reused in {attempts} attempts")


@pytest.mark.skipif(not _can_steer_pids(), reason="needs root and a writable ns_last_pid")
def test_retried_stop_of_an_exited_launch_never_hits_the_launch_that_reused_its_pid(live):
    old = live.launch(["sh", "-c", "exit 3"], key="old")
    assert live.wait_exit("old")["exit_code"] == 3
    new = _launch_on_pid(live, old["pid"], ["sleep", "1000"])
    # (Both may even have the same start ticks, when the reuse happens within one tick.)
    assert new["pid"] == old["pid"]

    again = live.call("stop", {"launch_key": "old"})  # the retry of an earlier stop
    assert again["outcome"] == "already_exited" and again["exit"]["exit_code"] == 3
    with pytest.raises(NotFound):
        live.call("signal", {"launch_key": "old", "signal": "KILL"})
    with pytest.raises(NotFound):
        live.call("signal", {"launch_key": "old", "signal": "KILL", "group": False})
    st = read_stat(new["pid"])
    assert st is not None and not st.zombie
    assert start_ticks(new["pid"]) == new["start_ticks"]
    inv = {r["launch_key"]: r for r in live.call("inventory")["launches"]}
    assert inv[new["launch_key"]]["pid"] == new["pid"]
    assert live.call("stop", {"launch_key": new["launch_key"]})["outcome"] == "stopped"


def _running(pid: int) -> bool:
    st = read_stat(pid)
    return st is not None and not st.zombie


def _gone(pids: list[int], timeout: float = 5.0) -> bool:
    """True once none of ``pids`` runs (a zombie orphan waits for the owner's reaper)."""
    deadline = time.monotonic() + timeout
    while any(_running(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_stop_kills_a_child_that_left_the_group_with_setsid(live):
    r = live.launch(["sh", "-c", "setsid sleep 1000 & echo $!; exec sleep 1000"])
    escapee = int(live.first_line(r))
    deadline = time.monotonic() + 10    # `echo $!` may run before the child's setsid()
    while os.getsid(escapee) != escapee and time.monotonic() < deadline:
        time.sleep(0.01)
    assert escapee in children(r["pid"]) and os.getsid(escapee) == escapee
    result = live.call("stop", {"launch_key": r["launch_key"]})
    assert result["outcome"] == "stopped" and not result["escalated"]
    assert not _running(escapee)


def test_stop_after_the_leader_exited_kills_its_setsid_orphan(live):
    r = live.launch(["sh", "-c", "setsid sleep 1000 & echo $!; exit 0"])
    escapee = int(live.first_line(r))
    assert live.wait_exit(r["launch_key"])["exit_code"] == 0
    assert _running(escapee) and read_stat(escapee).ppid == live.owner.proc.pid
    result = live.call("stop", {"launch_key": r["launch_key"]})
    assert result["outcome"] == "stopped"
    assert not _running(escapee)
    assert live.call("stop", {"launch_key": r["launch_key"]})["outcome"] == "already_exited"


def test_stop_finds_an_orphan_without_the_launch_key_by_its_group(live):
    # The child clears its environment and its parent exits at once: nothing but its
    # process group says where it came from, and only the last look before the reap
    # (the zombie leader still holds the group's number) can tell.
    r = live.launch(["sh", "-c", "env -i sleep 1000 & echo $!; exit 0"])
    orphan = int(live.first_line(r))
    assert live.wait_exit(r["launch_key"])["exit_code"] == 0
    assert os.getpgid(orphan) == r["pid"]
    assert live.call("stop", {"launch_key": r["launch_key"]})["outcome"] == "stopped"
    assert not _running(orphan)


def test_owner_shutdown_stops_descendants_that_outlived_their_leader(short_home):
    owner = OwnerProcess(short_home).start()
    lv = Live(owner)
    try:
        r = lv.launch(["sh", "-c", "setsid sleep 1000 & echo $!; exit 0"])
        escapee = int(lv.first_line(r))
        lv.wait_exit(r["launch_key"])
        assert _running(escapee)
    finally:
        lv.c.close()
        assert owner.stop() == 0
    assert _gone([escapee])


# The store fails every write of a launch's state while ``disk-full`` exists in the home
# (as SQLite does when the disk is full), in the real owner process.


@pytest.fixture
def full_disk_owner(short_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    monkeypatch.setenv("TENURE_TEST_HOME", str(short_home))
    owner = OwnerProcess(short_home, preload=DISK_FULL).start()
    lv = Live(owner)
    try:
        yield lv
    finally:
        lv.c.close()
        if owner.proc is not None and owner.proc.poll() is None:
            owner.stop()


def test_storage_error_after_spawn_keeps_the_launch_watched_and_reports_it_uncertain(
        full_disk_owner, short_home):
    live = full_disk_owner
    (short_home / "disk-full").touch()
    r = live.launch(["sh", "-c", "echo started; exec sleep 1000"], key="full")
    assert r["state"] == "uncertain" and r["error"]["code"] == "STORAGE_FAILED"
    assert _running(r["pid"]) and start_ticks(r["pid"]) == r["start_ticks"]
    assert live.launch(["true"], key="full")["pid"] == r["pid"]  # a retry starts nothing
    assert live.first_line(r) == "started"  # its pipes are drained
    inv = live.call("inventory")
    assert [x["state"] for x in inv["launches"] if x["launch_key"] == "full"] == ["uncertain"]
    assert [x["launch_key"] for x in inv["uncertain"]] == ["full"]
    assert live.call("status")["uncertain"] == ["full"]
    events = live.c.call("observations.read", {"after": 0})["events"]
    assert any(e["kind"] == "launch_uncertain" and e["launch_key"] == "full" for e in events)

    result = live.call("stop", {"launch_key": "full"})  # watched: stopped and reported
    assert result["outcome"] == "stopped" and not _running(r["pid"])
    assert live.wait_exit("full")["signal"] == 15
    gone = live.call("inventory")
    assert gone["launches"] == [] and gone["uncertain"][0]["exit"]["signal"] == 15

    (short_home / "disk-full").unlink()  # the disk has room again: shutdown records it
    live.c.close()
    assert live.owner.stop() == 0
    from owner.store import LaunchState, OwnerStore
    st = OwnerStore(live.owner.paths.db)
    try:
        row = st.get_launch("full")
    finally:
        st.close()
    assert row is not None and row.state is LaunchState.EXITED
    assert (row.pid, row.start_ticks, row.exit["signal"]) == (r["pid"], r["start_ticks"], 15)


def test_a_launch_that_cannot_be_recorded_is_storage_failed_and_starts_nothing(
        full_disk_owner, short_home):
    """Was INTERNAL, which the backend reported as 'launch not answered by the owner'."""
    live = full_disk_owner
    (short_home / "disk-full-at-start").touch()
    with pytest.raises(StorageFailed) as err:
        live.launch(["sleep", "1000"], key="early")
    assert "the launch could not be recorded" in err.value.msg
    assert "nothing was started" in err.value.msg
    assert err.value.data["launch_key"] == "early"
    assert children(live.owner.proc.pid) == []
    assert live.call("inventory")["launches"] == []
    (short_home / "disk-full-at-start").unlink()   # room again: the same key launches
    r = live.launch(["sleep", "1000"], key="early")
    assert r["state"] == "running" and _running(r["pid"])
    live.call("stop", {"launch_key": "early"})


def test_status_says_while_log_lines_cannot_be_written(full_disk_owner, short_home):
    live = full_disk_owner
    assert live.call("status")["log_write_error"] is None
    (short_home / "journal-full").touch()
    r = live.launch(["sh", "-c", "while :; do echo x; sleep 0.01; done"], key="talker")
    deadline = time.monotonic() + 10
    while (failing := live.call("status")["log_write_error"]) is None:
        assert time.monotonic() < deadline, "no log_write_error"
        time.sleep(0.02)
    assert failing["error"] == "OperationalError: database or disk is full"
    assert failing["batches"] >= 1 and failing["lines"] >= 1
    assert abs(failing["since"] - time.time()) < 30
    assert live.call("status")["log_dropped"]["s/a"] >= failing["lines"]
    (short_home / "journal-full").unlink()   # room again: the next batch ends it
    deadline = time.monotonic() + 10
    while live.call("status")["log_write_error"] is not None:
        assert time.monotonic() < deadline, "log_write_error stayed"
        time.sleep(0.02)
    assert live.first_line(r) == "x"
    live.call("stop", {"launch_key": "talker"})


def test_owner_shutdown_with_an_unrecorded_launch_is_not_clean(full_disk_owner, short_home):
    live = full_disk_owner
    (short_home / "disk-full").touch()
    r = live.launch(["sleep", "1000"], key="full")
    assert r["state"] == "uncertain"
    live.c.close()
    assert live.owner.stop() == 1  # applications stopped, but the state stage failed
    assert not _running(r["pid"])
    receipt = json.loads(Path(live.owner.paths.receipt).read_text())
    assert receipt["state"] == "failed" and receipt["failed_stage"] == "state"


def test_logs_of_long_lines_answer_in_pages_instead_of_internal(live):
    code = "import sys; sys.stdout.write(('x' * 500 + '\\n') * 10000)"
    r = live.launch([sys.executable, "-c", code])
    live.wait_exit(r["launch_key"])
    deadline = time.monotonic() + 30
    while live.c.call("status")["log_last_id"] < 10_000:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    page = live.c.call("logs.read", {"limit": 10_000})  # was INTERNAL: over 4 MiB
    assert page["more"] and 0 < len(page["records"]) < 10_000
    got, after = len(page["records"]), page["next"]
    while page["more"]:
        page = live.c.call("logs.read", {"after": after, "limit": 10_000,
                                         "max_bytes": 256 * 1024})
        got, after = got + len(page["records"]), page["next"]
    assert got == 10_000 and after == page["last_id"] == 10_000
    tail = live.c.call("logs.read", {"tail": 3, "app": "a"})
    assert [x["id"] for x in tail["records"]] == [9998, 9999, 10_000] and not tail["more"]
