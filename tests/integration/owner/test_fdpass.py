"""Passing fds as 3.. to real processes (owner.fdpass through PopenSpawner): the names,
LISTEN_PID equal to the exec'd process's pid, nothing else inherited — also when a source
sits where another must go, with a umask step before the exec, and when the exec itself
fails after the fds were placed."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from owner.fdpass import PassFds
from owner.runas import RunAs
from owner.spawn import PopenSpawner, Spawned
from owner.specs import LaunchSpec
from protocol.errors import LaunchFailed

REPORT = """
import json, os, stat
fds = {}
for name in os.listdir('/proc/self/fd'):
    fd = int(name)
    try:
        st = os.fstat(fd)
    except OSError:
        continue  # the directory listing itself
    fds[fd] = stat.S_IFMT(st.st_mode) == stat.S_IFSOCK and 'sock' or st.st_ino
umask = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Umask')][0]
print(json.dumps({'pid': os.getpid(), 'env': {k: v for k, v in os.environ.items()
                  if k.startswith('LISTEN_')}, 'fds': sorted(fds), 'umask': umask,
                  'inodes': {fd: os.fstat(fd).st_ino for fd in fds if fd >= 3}}))
"""


def run(spec: LaunchSpec, passed: PassFds) -> tuple[Spawned, dict[str, Any]]:
    sp = PopenSpawner(use_pidfd=False).spawn(spec, None, passed=passed)
    try:
        os.waitpid(sp.pid, 0)
        out = b""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                chunk = os.read(sp.stdout_fd, 65536)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            if not chunk:
                break
            out += chunk
        err = os.read(sp.stderr_fd, 65536) if out == b"" else b""
        assert out, err
        return sp, json.loads(out)
    finally:
        os.close(sp.stdout_fd)
        os.close(sp.stderr_fd)


def spec(**kw: Any) -> LaunchSpec:
    return LaunchSpec(argv=(sys.executable, "-c", REPORT),
                      env={"PATH": os.environ["PATH"], "LISTEN_PID": "1", "LISTEN_FDS": "7"},
                      **kw)


@pytest.fixture
def listener() -> Any:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s


def test_fds_arrive_at_3_named_with_listen_pid_of_the_process(listener: Any) -> None:
    r, w = os.pipe()
    want = {"3": os.fstat(listener.fileno()).st_ino, "4": os.fstat(r).st_ino}
    stray = os.open("/dev/null", os.O_RDONLY)
    os.set_inheritable(stray, True)  # an fd the owner would leak if anything did
    try:
        sp, got = run(spec(), PassFds((listener.fileno(), r), ("http", "token")))
    finally:
        for fd in (r, w, stray):
            os.close(fd)
    assert got["pid"] == sp.pid
    assert got["env"] == {"LISTEN_FDS": "2", "LISTEN_PID": str(sp.pid),
                          "LISTEN_FDNAMES": "http:token"}
    assert got["fds"] == [0, 1, 2, 3, 4]  # the stray fd and the owner's own stayed out
    assert got["inodes"] == want


def test_sources_on_each_others_places_are_swapped_right(listener: Any) -> None:
    """Sources at 3 and 4, passed in the other order: each must land on the other's
    number, which a naive dup2 loop gets wrong."""
    saved = [os.dup(3), os.dup(4)]
    r, w = os.pipe()
    want = {3: os.fstat(r).st_ino, 4: os.fstat(listener.fileno()).st_ino}
    try:
        os.dup2(listener.fileno(), 3, inheritable=False)
        os.dup2(r, 4, inheritable=False)
        _, got = run(spec(), PassFds((4, 3), ("pipe", "sock")))
    finally:
        os.dup2(saved[0], 3, inheritable=os.get_inheritable(saved[0]))
        os.dup2(saved[1], 4, inheritable=os.get_inheritable(saved[1]))
        for fd in (*saved, r, w):
            os.close(fd)
    assert got["fds"] == [0, 1, 2, 3, 4]
    assert {int(k): v for k, v in got["inodes"].items()} == want


def test_a_umask_step_runs_before_the_handoff(listener: Any) -> None:
    _, got = run(spec(run_as=RunAs(umask=0o027)), PassFds((listener.fileno(),), ("a",)))
    assert got["umask"] == "0027" and got["fds"] == [0, 1, 2, 3]


def test_an_exec_failing_after_the_fds_were_placed_leaves_nothing(
        listener: Any, tmp_path: Path) -> None:
    junk = tmp_path / "not-a-program"
    junk.write_bytes(b"\x7fELF garbage")
    junk.chmod(0o755)
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(LaunchFailed) as info:
        PopenSpawner().spawn(LaunchSpec(argv=(str(junk),), env={}), None,
                             passed=PassFds((listener.fileno(),), ("a",)))
    assert "exec of" in info.value.msg and "format" in info.value.msg.lower(), info.value.msg
    assert set(os.listdir("/proc/self/fd")) <= before
