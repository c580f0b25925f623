"""What marks a process as this home's app: the home's path in its environment, unless it
carries another home directory's id in another PID namespace (another container's
tenure at the same path: its apps are never sealed or counted here). Another id in this
namespace still counts: the home may have been made again under its running apps."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import psutil

from owner.evidence import strays
from protocol.layout import HOME_ID_ENV, LAUNCH_KEY_ENV, OWNER_HOME_ENV, home_id
from protocol.procfs import environ


def _carrier(env: dict[str, str], *prefix: str) -> tuple[subprocess.Popen[bytes], int]:
    """``sleep`` with ``env`` (run under ``prefix``), and its pid once its exec has given
    it that environment."""
    proc = subprocess.Popen([*prefix, "sleep", "60"], env={"PATH": os.environ["PATH"], **env})
    mark = f"{OWNER_HOME_ENV}={env[OWNER_HOME_ENV]}".encode()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        family = [proc.pid, *(c.pid for c in psutil.Process(proc.pid).children())]
        sleeping = [p for p in family if mark in (environ(p) or ())
                    and (not prefix or p != proc.pid)]
        if sleeping:
            return proc, sleeping[0]
        time.sleep(0.001)
    raise AssertionError("the carrier never got its environment")


def test_a_process_of_the_same_path_in_another_directory_is_not_this_homes(
        tmp_path: Path) -> None:
    home = os.path.realpath(tmp_path)
    ours = {OWNER_HOME_ENV: home, LAUNCH_KEY_ENV: "s/a/0/1"}
    other = {**ours, HOME_ID_ENV: "1:2"}
    procs = {"id": _carrier({**ours, HOME_ID_ENV: home_id(home)}),
             "older": _carrier(ours),                      # an older owner's: no id
             "remade": _carrier(other)}                    # the home made again
    if os.geteuid() == 0:   # another container: another PID namespace
        procs["container"] = _carrier(other, "unshare", "--pid", "--fork", "--kill-child")
    else:
        print("not root: the other PID namespace's case is not run (unshare needs root)")
    try:
        found = strays(home)
        assert {procs[k][1] for k in ("id", "older", "remade")} <= set(found)
        assert "container" not in procs or procs["container"][1] not in found
        assert os.getpid() not in found
    finally:
        for p, _ in procs.values():
            p.kill()
            p.wait()


def test_nothing_carries_a_fresh_home(tmp_path: Path) -> None:
    assert strays(os.path.realpath(tmp_path)) == []
