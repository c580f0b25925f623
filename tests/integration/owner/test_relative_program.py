"""A relative program with a '/' (``rvbin/hello.sh``) is looked up from the directory
the launch starts in, whether or not the launch passes sockets, and a failure to find it
is explained against that directory (a real owner, real execs).

Was: an app with a ``user`` and no ``cwd`` starts in ``/``, but with a socket its
program was looked up from the owner's working directory (and ran), without one exec
looked in ``/`` and failed, saying "its #! interpreter was not found" of a script that
exists where the owner runs and whose #! line is fine."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from owner.testing import GuardianKey, OwnerProcess
from protocol.client import Client
from protocol.errors import LaunchFailed

PROGRAM = "rvbin/hello.sh"


class Owner:
    """A real owner (its home below ``work``) started in ``work`` as its working
    directory, with ``rvbin/hello.sh`` there (it prints the directory it runs in)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        home = work / "home"
        home.mkdir(mode=0o700)
        self.proc = OwnerProcess(home).start()
        self.c: Client = self.proc.client()
        self.epoch = GuardianKey().bootstrap(self.c, self.proc.instance)
        self.n = 0

    def params(self, socket: bool, **extra: Any) -> dict[str, Any]:
        self.n += 1
        p: dict[str, Any] = {
            "launch_key": f"k{self.n}", "stack": "s", "app": f"a{self.n}", "instance": 0,
            "generation": 1, "argv": [PROGRAM], "env": {"PATH": "/usr/bin:/bin"},
            "stop": {"signal": "KILL", "timeout": 5}, **extra}
        if socket:
            p["sockets"] = [{"name": "web", "listen": f"unix:{self.work}/s{self.n}.sock"}]
        return p

    def started_in(self, socket: bool, **extra: Any) -> str:
        """Where the launched program ran (it prints ``pwd`` and exits)."""
        p = self.params(socket, **extra)
        self.c.call("launch", p, epoch=self.epoch)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            recs = self.c.call("logs.read", {"after": 0, "limit": 10, "app": p["app"],
                                             "stream": "stdout"})["records"]
            if recs:
                return str(recs[0]["data"].decode())
            time.sleep(0.02)
        raise AssertionError(f"{p['app']} printed nothing")

    def refused(self, socket: bool, **extra: Any) -> LaunchFailed:
        with pytest.raises(LaunchFailed) as e:
            self.c.call("launch", self.params(socket, **extra), epoch=self.epoch)
        return e.value


@pytest.fixture
def owner(short_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Owner]:
    os.chmod(short_home, 0o755)   # another user may reach the script, not the home
    (short_home / "rvbin").mkdir(mode=0o755)
    script = short_home / PROGRAM
    script.write_text("#!/bin/sh\npwd\n")
    script.chmod(0o755)
    monkeypatch.chdir(short_home)   # the owner's working directory
    live = Owner(short_home)
    try:
        yield live
    finally:
        live.c.close()
        assert live.proc.stop() == 0


@pytest.mark.parametrize("extra", [{}, {"limits": {"nofile": 64}}],
                         ids=["popen", "child-setup"])
def test_without_cwd_or_user_a_relative_program_runs_from_the_owners_directory(
        owner: Owner, extra: dict[str, Any]) -> None:
    for socket in (False, True):
        assert owner.started_in(socket, **extra) == str(owner.work), socket


@pytest.mark.root
def test_with_a_cwd_another_users_relative_program_runs_from_it(owner: Owner) -> None:
    for socket in (False, True):
        assert owner.started_in(socket, identity={"user": "nobody"},
                                cwd=str(owner.work)) == str(owner.work), socket


@pytest.mark.root
def test_another_users_app_without_cwd_looks_its_program_up_in_root_with_or_without_a_socket(
        owner: Owner) -> None:
    said = [owner.refused(socket, identity={"user": "nobody"}) for socket in (False, True)]
    for err in said:
        spawn = err.data["spawn"]
        assert (spawn["step"], spawn["errno_name"], spawn["hint"]) == \
            ("exec", "ENOENT", None), spawn
        assert spawn["text"] == f"spawn failed: {PROGRAM}: No such file or directory"
    assert said[0].msg == said[1].msg
    assert said[0].data["spawn"] == said[1].data["spawn"]
