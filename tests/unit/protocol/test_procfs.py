"""The one /proc reader: stat parsing, children, environment, groups, the psutil fallback."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import procfs, procholders
from protocol.procfs import (
    children,
    environ_matches,
    parse_stat,
    read_stat,
    start_ticks,
    status_groups,
)

GONE = 2**22 + 7


def test_stat_of_this_process():
    me = read_stat(os.getpid())
    assert me is not None and me.pid == os.getpid() and not me.zombie
    assert (me.ppid, me.pgid, me.sid) == (os.getppid(), os.getpgid(0), os.getsid(0))
    assert me.start_ticks == start_ticks(os.getpid())


def test_a_missing_process_reads_as_nothing():
    assert read_stat(GONE) is None and start_ticks(GONE) is None
    assert children(GONE) == [] and status_groups(GONE) is None


@given(st.text(alphabet=st.characters(blacklist_characters="\0\n", blacklist_categories=("Cs",)),
               max_size=20))
def test_comm_with_parens_and_spaces_never_shifts_fields(comm):
    fields = ["S", "1", "777", "778"] + ["0"] * 15 + ["4242", "0"]
    line = (f"123 ({comm}) " + " ".join(fields)).encode()
    got = parse_stat(123, line)
    assert (got.state, got.ppid, got.pgid, got.sid, got.start_ticks) == ("S", 1, 777, 778,
                                                                          4242)


@pytest.mark.parametrize("junk", [b"", b"123 (x", b"123 (x) S", b"123 (x) S a b c"])
def test_malformed_stat_raises_value_or_index_error(junk):
    with pytest.raises((ValueError, IndexError)):
        parse_stat(123, junk)


def test_environ_matches_finds_only_whole_entries():
    me = os.getpid()
    with open(f"/proc/{me}/environ", "rb") as f:
        entry = f.read().split(b"\0")[0]  # the exec-time block, not os.environ
    assert environ_matches([entry], [me]) == {entry: [me]}
    assert environ_matches([entry[:-1]], [me]) == {}
    assert environ_matches([], [me]) == {}
    assert me in environ_matches([entry]).get(entry, [])


def test_own_groups_are_listed():
    assert set(status_groups(os.getpid()) or ()) == set(os.getgroups())


def test_psutil_fallback_gives_centiseconds(monkeypatch):
    assert procfs._psutil_ticks(os.getpid()) > 0
    assert procfs._psutil_ticks(GONE) is None
    monkeypatch.setattr(procfs, "PROC", "/nonexistent")
    assert start_ticks(os.getpid()) == procfs._psutil_ticks(os.getpid())


@pytest.mark.parametrize("proc_root", ["/proc", "/nonexistent"], ids=["procfs", "psutil"])
def test_an_exited_unreaped_process_is_not_running(proc_root: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procfs, "PROC", proc_root)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        ticks = procfs.start_ticks(pid)
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, left unreaped
        assert ticks is not None and procfs.start_ticks(pid) == ticks  # still there
        assert not procfs.running(pid, ticks)
    finally:
        os.waitpid(pid, 0)
    assert procfs.running(os.getpid(), start_ticks(os.getpid()) or 0)
    assert not procfs.running(os.getpid(), (start_ticks(os.getpid()) or 0) + 1)


def test_mapped_files_lists_paths_only(tmp_path, monkeypatch):
    import sys
    assert os.path.realpath(sys.executable) in map(os.path.realpath, procfs.mapped_files())
    (tmp_path / "9").mkdir()
    (tmp_path / "9" / "maps").write_text(
        "55d0-55d1 r--p 00000000 fd:01 7 /usr/bin/x y\n"        # a space in the path
        "7f00-7f10 rw-p 00000000 00:00 0 \n"                    # anonymous
        "7f10-7f20 r-xp 00000000 fd:01 42  /lib/libz.so (deleted)\n"
        "7ffd-7ffe rw-p 00000000 00:00 0  [stack]\n")
    monkeypatch.setattr(procfs, "PROC", str(tmp_path))
    assert procfs.mapped_files(9) == ["/usr/bin/x y", "/lib/libz.so (deleted)"]
    assert procfs.mapped_files(10) is None


def test_silence_says_what_a_silent_process_is_doing():
    """A daemon that did not answer is named with its /proc state: stopped (and how to
    continue it), sleeping, exited and unreaped, or gone."""
    import signal
    import subprocess
    import time

    def reach(pid: int, states: str) -> None:
        for _ in range(500):
            if (st := read_stat(pid)) is not None and st.state in states:
                return
            time.sleep(0.01)

    child = subprocess.Popen(["sleep", "60"])
    try:
        reach(child.pid, "S")
        assert procfs.silence(child.pid) == \
            f"pid {child.pid} runs (state S) but did not answer"
        os.kill(child.pid, signal.SIGSTOP)
        reach(child.pid, "Tt")
        assert procfs.silence(child.pid) == (
            f"pid {child.pid} is stopped (SIGSTOP or a debugger); "
            f"kill -CONT {child.pid} continues it")
        child.kill()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert procfs.silence(child.pid) == f"pid {child.pid} has exited"
    finally:
        child.kill()
        child.wait()
    assert procfs.silence(GONE) == f"pid {GONE} is gone"


_ORPHAN_SCRIPT = r"""
import json, os, subprocess, sys, threading, time
from owner.reaper import become_subreaper
from protocol.procfs import children, main_thread_children
become_subreaper()
out, spawned, done = {}, threading.Event(), threading.Event()
def worker():   # alive while the lists are read: its children stay its own
    out["direct"] = subprocess.Popen(["sleep", "30"])
    sh = subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"],
                        capture_output=True, text=True)
    out["orphan"] = int(sh.stdout)   # its shell is gone: re-parented to this process
    spawned.set()
    done.wait()
t = threading.Thread(target=worker)
t.start()
spawned.wait()
try:
    deadline = time.monotonic() + 5
    while out["orphan"] not in main_thread_children(os.getpid()):
        assert time.monotonic() < deadline, "the orphan never reached the main thread"
        time.sleep(0.01)
    print(json.dumps({"main": main_thread_children(os.getpid()),
                      "all": children(os.getpid()),
                      "direct": out["direct"].pid, "orphan": out["orphan"]}))
finally:
    done.set(); t.join()
    out["direct"].kill(); out["direct"].wait()
    os.kill(out["orphan"], 9); os.waitpid(out["orphan"], 0)
"""


def test_orphans_are_listed_by_the_main_thread_even_when_another_thread_forked():
    """The owner finds orphans with one read (main_thread_children): the kernel gives an
    orphan to its reaper's first live thread, whatever thread forked its ancestor."""
    import json
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", _ORPHAN_SCRIPT], capture_output=True,
                       text=True, timeout=30, cwd=os.path.dirname(os.path.dirname(
                           os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["orphan"] in got["main"] and got["orphan"] in got["all"]
    assert got["direct"] not in got["main"] and got["direct"] in got["all"]


def test_ticks_between_gives_the_tick_both_readings_fall_in(monkeypatch):
    monkeypatch.setattr(procfs, "_TICK_NS", 10_000_000)
    assert procfs.ticks_between(1_230_000_001, 1_239_999_999) == 123
    assert procfs.ticks_between(1_230_000_000, 1_230_000_000) == 123
    # straddling a tick boundary, readings out of order, or no known tick: ask /proc
    assert procfs.ticks_between(1_239_999_999, 1_240_000_000) is None
    assert procfs.ticks_between(1_235_000_000, 1_234_000_000) is None
    monkeypatch.setattr(procfs, "_TICK_NS", None)
    assert procfs.ticks_between(1_230_000_001, 1_230_000_002) is None


def test_a_tick_that_is_not_whole_nanoseconds_is_not_used(monkeypatch):
    monkeypatch.setattr(procfs.os, "sysconf", lambda name: 3)
    assert procfs._tick_ns() is None
    monkeypatch.setattr(procfs.os, "sysconf", lambda name: 100)
    assert procfs._tick_ns() == 10_000_000


def test_this_process_started_at_the_tick_proc_shows():
    # the clock the kernel stamps processes with is the one boottime_ns reads
    assert procfs.start_ticks(os.getpid()) <= procfs.boottime_ns() // procfs._TICK_NS


LOCKS = (b"1: POSIX  ADVISORY  WRITE 900 fe:00:77 0 EOF\n"
         b"2: FLOCK  ADVISORY  WRITE 4711 fe:00:77 0 EOF\n"
         b"2: -> FLOCK  ADVISORY  WRITE 4712 fe:00:77 0 EOF\n"
         b"3: FLOCK  ADVISORY  WRITE 4713 08:01:77 0 EOF\n"
         b"4: FLOCK  ADVISORY  WRITE x fe:00:77 0 EOF\ngarbage\n")


def test_parse_locks_finds_the_flock_holder_of_one_file_only() -> None:
    """A guardian that hangs before it listens is found by its lock (/proc/locks)."""
    assert procholders.parse_locks(LOCKS, 77) == [4711, 4713]
    assert procholders.parse_locks(LOCKS, 78) == []


def test_flock_holder_names_this_process_for_a_lock_it_holds(tmp_path) -> None:
    import fcntl
    path = str(tmp_path / "x.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert procholders.flock_holder(path) is None
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert procholders.flock_holder(path) == os.getpid()
    finally:
        os.close(fd)
    assert procholders.flock_holder(str(tmp_path / "missing")) is None


def test_flock_holder_does_not_trust_the_device_proc_locks_names(tmp_path, monkeypatch):
    """On a btrfs subvolume /proc/locks gives the superblock's device, not the one stat
    gives: the holder is found by the inode and confirmed by the file it has open. A
    pid that holds a lock on another file with the same inode number is not it."""
    import fcntl
    import subprocess
    path = str(tmp_path / "x.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    other = subprocess.Popen(["sleep", "60"])
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        ino = os.stat(path).st_ino
        fake = (f"1: FLOCK  ADVISORY  WRITE {other.pid} 00:99:{ino} 0 EOF\n"
                f"2: FLOCK  ADVISORY  WRITE {os.getpid()} 00:2a:{ino} 0 EOF\n").encode()
        real = procholders.read_bounded
        monkeypatch.setattr(procholders, "read_bounded", lambda p, limit=4096: fake if
                            p.endswith("/locks") else real(p, limit))
        assert procholders.flock_holder(path) == os.getpid()
    finally:
        other.kill()
        other.wait()
        os.close(fd)
