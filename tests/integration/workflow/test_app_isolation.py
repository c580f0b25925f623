"""An app running as another user cannot reach the control plane: it connects to each
socket, reads each private file and signals each daemon — all refused. With the
directories opened up by mistake the daemons still refuse its uid (UNAUTHORIZED) and log
every attempt (a whole tenure, as root)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.root

NOBODY = 65534

# Runs as nobody under the system interpreter (tenure's own may live where nobody cannot
# go). Speaks just enough of the protocol to get an answer to a hello: a 4-byte length
# and the msgpack map {"t": "hello", "proto": 1, "role": "viewer"}.
PROBE = r"""
import errno, json, os, signal, socket, struct, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
socks, files, pids = sys.argv[1].split(","), sys.argv[2].split(","), sys.argv[3].split(",")
HELLO = (b"\x83\xa1t\xa5hello\xa5proto\x01\xa4role\xa6viewer")

def attempt(fn):
    try:
        return fn()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))

def hello(path):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(path)
        s.sendall(struct.pack(">I", len(HELLO)) + HELLO)
        answer = s.recv(65536)
    return "UNAUTHORIZED" if b"UNAUTHORIZED" in answer else repr(answer)

def report():
    out = {"uid": os.getuid(), "groups": sorted(os.getgroups()),
           "umask": oct(os.umask(0o077)),
           "socks": {p: attempt(lambda: hello(p)) for p in socks},
           "files": {p: attempt(lambda: open(p, "rb").close() or "read") for p in files},
           "signals": {p: attempt(lambda: os.kill(int(p), 0) or "delivered") for p in pids}}
    print(json.dumps(out), flush=True)

report()
signal.sigwait({signal.SIGUSR1})  # the test opens the directories up, then wakes us
report()
"""


def config(home: Path, socks: list[str], files: list[str], pids: list[int]) -> str:
    args = [",".join(socks), ",".join(files), ",".join(map(str, pids))]
    return f"""
[stacks.iso.apps.probe]
command = {json.dumps(["/usr/bin/python3", "-c", PROBE, *args])}
user = "nobody"
umask = "0077"
restart = "never"
"""


def probe_reports(cluster: Any, n: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    out: list[dict[str, Any]] = []
    recs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        recs = cluster.call("logs", {"stack": "iso", "app": "probe", "limit": 100})["records"]
        out = [json.loads(r["data"]) for r in recs if r["stream"] == "stdout"]
        if len(out) >= n:
            return out
        time.sleep(0.1)
    raise AssertionError(f"the probe reported {len(out)} times, not {n}: {recs} "
                         f"{cluster.apps()}")


def private_files(home: Path) -> list[str]:
    names = ["execution/owner.db", "execution/journal.db", "execution/guardian.pub",
             "runtime/state.db", "runtime/guardian.key", "backend/backend.db",
             "backend/recovery.db"]
    files = [str(home / n) for n in names]
    files += [str(p) for p in (home / "runtime" / "handoffs").iterdir()][:2]
    return files


def test_an_app_as_another_user_cannot_reach_the_control_plane(cluster: Any) -> None:
    cluster.up('[stacks.iso.apps.idle]\ncommand = ["sleep", "infinity"]\nuser = "nobody"\n')
    home, layout = cluster.home, cluster.layout
    socks = [layout.owner_sock, layout.guardian_sock, layout.api_sock]
    pids = [*cluster.daemon_pids(), cluster.backend_pid()]
    assert len(pids) == 3
    files = private_files(home)
    assert all(os.path.exists(f) for f in files), files
    cluster.up(config(home, socks, files, pids))

    first = probe_reports(cluster, 1)[0]
    probe_pid = cluster.apps()["iso/probe/0"]["pid"]
    assert first["uid"] == NOBODY and first["umask"] == "0o77"
    assert first["groups"] == sorted(os.getgrouplist("nobody", NOBODY))
    assert set(first["socks"].values()) == {"EACCES"}, first["socks"]
    assert set(first["files"].values()) == {"EACCES"}, first["files"]
    assert set(first["signals"].values()) == {"EPERM"}, first["signals"]

    # Defense in depth: even with every directory on the way opened up by mistake and
    # the sockets world-writable, each daemon refuses the app's uid and logs it.
    dirs = [home, home / "execution", home / "runtime", home / "backend"]
    modes = {d: os.stat(d).st_mode & 0o777 for d in dirs}
    for d in dirs:
        os.chmod(d, 0o711)
    for s in socks:
        os.chmod(s, 0o666)
    try:
        os.kill(probe_pid, signal.SIGUSR1)
        # no client of ours may use the sockets while they are 0666: wait for its exit
        deadline = time.monotonic() + 60
        while os.path.exists(f"/proc/{probe_pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        for d, mode in modes.items():
            os.chmod(d, mode)
        for s in socks:
            os.chmod(s, 0o600)
    second = probe_reports(cluster, 2)[1]
    assert set(second["socks"].values()) == {"UNAUTHORIZED"}, second["socks"]
    assert set(second["files"].values()) == {"EACCES"}, second["files"]  # 0600 files
    logs = "".join(p.read_text() for p in (home / "logs").iterdir())
    assert logs.count(f"refused uid={NOBODY}") >= 3, logs[-3000:]
    for sock in socks:
        assert f"on {sock}: uid {NOBODY} may not use this socket" in logs
