"""Apps run as the user, groups, umask and rlimits their launch names (a real owner)."""

from __future__ import annotations

import os
import sys
import time
import uuid  # the forked owner mints its identity with it
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from owner.testing import GuardianKey, OwnerProcess
from owner.testing import scratch_group as new_group
from protocol.errors import LaunchFailed, PrivilegeRequired

pytestmark = pytest.mark.root

NOBODY = 65534
REPORT = "id -u; id -g; id -G; umask; ulimit -n; ulimit -c; pwd; echo $$"


class Owner:
    def __init__(self, owner: OwnerProcess, **client: Any) -> None:
        self.owner = owner
        self.c = owner.client(**client)
        self.epoch = GuardianKey().bootstrap(self.c, owner.instance)
        self.n = 0

    def launch(self, argv: list[str], **extra: Any) -> dict[str, Any]:
        self.n += 1
        r: dict[str, Any] = self.c.call("launch", {
            "launch_key": f"k{self.n}", "stack": "s", "app": f"a{self.n}", "instance": 0,
            "generation": 1, "argv": argv, "env": {"PATH": os.environ["PATH"]},
            "stop": {"signal": "KILL", "timeout": 5}, **extra}, epoch=self.epoch)
        return r

    def output(self, row: dict[str, Any], lines: int) -> list[str]:
        """The first ``lines`` stdout lines of launch ``row`` (it exits by itself)."""
        got: list[str] = []
        deadline = time.monotonic() + 20
        while len(got) < lines and time.monotonic() < deadline:
            recs = self.c.call("logs.read", {"after": 0, "limit": 100, "app": row["app"],
                                             "stream": "stdout"})["records"]
            got = [r["data"].decode() for r in recs]
            time.sleep(0.02)
        assert len(got) >= lines, got
        return got


@pytest.fixture
def owner(short_home: Path) -> Iterator[Owner]:
    o = OwnerProcess(short_home).start()
    live = Owner(o)
    try:
        yield live
    finally:
        live.c.close()
        assert o.stop() == 0, o.stderr_path.read_text() if o.stderr_path else ""


@pytest.fixture
def scratch_group() -> Iterator[tuple[str, int]]:
    with new_group("tng") as group:
        yield group


def test_app_runs_as_nobody_with_its_own_groups_umask_and_rlimits(owner: Owner) -> None:
    row = owner.launch(["sh", "-c", REPORT], cwd="/tmp",
                       identity={"user": "nobody", "umask": 0o027},
                       limits={"nofile": 321, "core": 0})
    uid, gid, groups, umask, nofile, core, cwd, pid = owner.output(row, 8)
    assert (uid, gid) == (str(NOBODY), str(NOBODY))
    # nobody's own groups from the group database, none of the owner's (root's)
    expected = {str(g) for g in os.getgrouplist("nobody", NOBODY)}
    assert set(groups.split()) == expected and "0" not in groups.split()
    assert (umask, nofile, core, cwd) == ("0027", "321", "0", "/tmp")
    assert int(pid) == row["pid"]  # the identity switch keeps the pid the owner recorded


def test_supplementary_groups_are_added_to_the_users_own(
        owner: Owner, scratch_group: tuple[str, int]) -> None:
    name, gid = scratch_group
    row = owner.launch(["id", "-G"], identity={"user": "nobody",
                                               "supplementary_groups": [name]})
    (groups,) = owner.output(row, 1)
    assert set(groups.split()) == {str(NOBODY), str(gid)}


def test_the_working_directory_is_entered_with_the_apps_permissions(
        owner: Owner, short_home: Path) -> None:
    private = short_home / "root-only"
    private.mkdir(mode=0o700)
    with pytest.raises(LaunchFailed) as e:
        owner.launch(["pwd"], cwd=str(private), identity={"user": "nobody"})
    assert "chdir" in e.value.msg and "Permission denied" in e.value.msg
    assert owner.c.call("inventory")["launches"] == []
    # root itself may enter it: the refusal above was the app's own permissions
    row = owner.launch(["pwd"], cwd=str(private), identity={"user": "root"})
    assert owner.output(row, 1) == [str(private)]


def test_a_user_that_does_not_exist_fails_the_launch(owner: Owner) -> None:
    with pytest.raises(LaunchFailed) as e:
        owner.launch(["true"], identity={"user": f"tnx{uuid.uuid4().hex[:8]}"})
    assert "does not exist" in e.value.msg and type(e.value) is LaunchFailed


class ForkedOwner(OwnerProcess):
    """An owner as a non-root user, forked from this process: this machine's interpreter
    lives under a directory other users cannot enter, so it is not exec'd again; every
    module the owner uses is imported while the child is still root."""

    def start(self, timeout: float = 15.0) -> ForkedOwner:
        # what the owner imports lazily: identities, the executor, codecs, grants
        import concurrent.futures.thread  # noqa: F401
        import encodings.ascii
        import encodings.idna
        import encodings.latin_1  # noqa: F401

        import owner.daemon
        import protocol.grant  # noqa: F401
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 2
            try:
                os.close(r)
                sys.stdout = os.fdopen(w, "w")  # READY goes here, not to the test's capture
                os.setgroups([])
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)
                code = owner.daemon.run(owner.daemon.OwnerPaths(self.home))
            finally:
                os._exit(code)
        os.close(w)
        self.pid = pid
        with os.fdopen(r) as f:
            line = f.readline()
        assert line.startswith("READY "), line
        self.instance = line.split()[1]
        return self

    def stop(self, sig: int = 15, timeout: float = 60.0) -> int:
        os.kill(self.pid, sig)
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)


def test_a_non_root_owner_refuses_another_user_and_runs_its_own(short_home: Path) -> None:
    os.chown(short_home, NOBODY, NOBODY)
    o = ForkedOwner(short_home).start()
    live = Owner(o, owners=(NOBODY,))
    try:
        assert live.c.call("status")["uid"] == NOBODY
        with pytest.raises(PrivilegeRequired) as e:
            live.launch(["true"], identity={"user": "root"})
        assert e.value.data["owner_uid"] == NOBODY
        # the same launch key answers the same refusal again (idempotent launches)
        with pytest.raises(PrivilegeRequired):
            live.c.call("launch", {"launch_key": "k1", "stack": "s", "app": "a1",
                                   "instance": 0, "generation": 1, "argv": ["true"],
                                   "identity": {"user": "root"}}, epoch=live.epoch)
        row = live.launch(["id", "-u"], identity={"user": "nobody", "umask": 0o077})
        assert live.output(row, 1) == [str(NOBODY)]
    finally:
        live.c.close()
        assert o.stop() == 0
