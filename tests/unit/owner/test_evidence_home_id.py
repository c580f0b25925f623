"""What marks a process as this home's app: the home's path in its environment and, when
it carries one, the home directory's id. The same path in another container names
another directory (another home); its apps are never sealed or counted here."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from owner.evidence import strays
from protocol.layout import HOME_ID_ENV, LAUNCH_KEY_ENV, OWNER_HOME_ENV, home_id
from protocol.procfs import environ


def _carrier(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``sleep`` with ``env``, once its exec has given it that environment."""
    proc = subprocess.Popen(["sleep", "60"], env={"PATH": os.environ["PATH"], **env})
    mark = f"{OWNER_HOME_ENV}={env[OWNER_HOME_ENV]}".encode()
    deadline = time.monotonic() + 10
    while mark not in (environ(proc.pid) or ()) and time.monotonic() < deadline:
        time.sleep(0.001)
    return proc


def test_a_process_of_the_same_path_in_another_directory_is_not_this_homes(
        tmp_path: Path) -> None:
    home = os.path.realpath(tmp_path)
    ours = {OWNER_HOME_ENV: home, LAUNCH_KEY_ENV: "s/a/0/1"}
    procs = {"id": _carrier({**ours, HOME_ID_ENV: home_id(home)}),
             "older": _carrier(ours),                      # an older owner's: no id
             "other": _carrier({**ours, HOME_ID_ENV: "1:2"})}
    try:
        found = strays(home)
        assert procs["id"].pid in found and procs["older"].pid in found
        assert procs["other"].pid not in found
        assert os.getpid() not in found
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def test_nothing_carries_a_fresh_home(tmp_path: Path) -> None:
    assert strays(os.path.realpath(tmp_path)) == []
