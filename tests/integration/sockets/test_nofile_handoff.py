"""A launch that passes sockets and lowers ``limits.nofile`` starts whatever number of
files the owner holds: the child used to lower RLIMIT_NOFILE before it moved the passed
fds into place, while every fd of the owner was still open in it, so the move found no
free slot under the app's limit (EMFILE) once the owner held more files than that."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from owner.testing import GuardianKey, OwnerProcess
from protocol.errors import LaunchFailed

STOP = {"signal": "TERM", "timeout": 5, "kill_after": 5}


def test_a_socket_app_with_a_low_nofile_starts_when_the_owner_holds_more_fds(
        short_home: Path) -> None:
    env = {"PATH": os.environ["PATH"]}
    web = {"stack": "s", "app": "web", "instance": 0, "generation": 1,
           "argv": ["sleep", "1000"], "env": env, "stop": STOP,
           "limits": {"nofile": 64},
           "sockets": [{"name": "web", "listen": f"unix:{short_home}/w.sock"}]}
    owner = OwnerProcess(short_home).start()
    try:
        with owner.client() as c:
            epoch = GuardianKey().bootstrap(c, owner.instance)
            c.call("launch", {**web, "launch_key": "w1"}, epoch=epoch)
            c.call("stop", {"launch_key": "w1"}, epoch=epoch)
            others = [f"o{i}" for i in range(24)]   # about 3 fds each in the owner
            for i, key in enumerate(others):
                c.call("launch", {"launch_key": key, "stack": "s", "app": f"o{i}",
                                  "instance": 0, "generation": 1,
                                  "argv": ["sleep", "1000"], "env": env, "stop": STOP},
                       epoch=epoch)
            row = c.call("launch", {**web, "launch_key": "w2", "generation": 2},
                         epoch=epoch)
            limits = Path(f"/proc/{row['pid']}/limits").read_text()
            assert any(line.startswith("Max open files") and line.split()[3] == "64"
                       for line in limits.splitlines()), limits
            assert sorted(os.listdir(f"/proc/{row['pid']}/fd"), key=int) == \
                ["0", "1", "2", "3"]
            for key in ["w2", *others]:
                c.call("stop", {"launch_key": key}, epoch=epoch)
        assert owner.stop() == 0
    finally:
        owner.stop()


def test_a_step_after_the_fds_are_placed_still_reports_its_failure(
        short_home: Path) -> None:
    """The placement renumbers the report pipe and may close Popen's own: a later step
    (here the chdir) that fails is still said, and the child leaves nothing behind."""
    missing = short_home / "gone"
    owner = OwnerProcess(short_home).start()
    try:
        with owner.client() as c:
            epoch = GuardianKey().bootstrap(c, owner.instance)
            with pytest.raises(LaunchFailed, match=f"chdir to '{missing}'.*No such file"):
                c.call("launch", {
                    "launch_key": "w1", "stack": "s", "app": "web", "instance": 0,
                    "generation": 1, "argv": ["sleep", "1000"], "cwd": str(missing),
                    "env": {"PATH": os.environ["PATH"]}, "stop": STOP,
                    "limits": {"nofile": 16},
                    "sockets": [{"name": "web", "listen": f"unix:{short_home}/w.sock"}]},
                    epoch=epoch)
            assert c.call("inventory")["launches"] == []
        assert owner.stop() == 0
    finally:
        owner.stop()
