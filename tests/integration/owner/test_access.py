"""System scope: the owner runs as root and admits only root and the service account on
its socket (``--service-account``); everybody else is refused and the refusal logged."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from owner.testing import OwnerProcess, in_child_as
from protocol.client import Client

pytestmark = pytest.mark.root

NOBODY = 65534  # stands in for the service account
STRANGER = 4321  # any other uid (an app's user, say)


def as_user(uid: int, gid: int, fn: Callable[[], Any]) -> Any:
    """``fn`` in a forked child with ``uid``/``gid`` and no other group."""
    return in_child_as(uid, gid, fn)


def status_as_admin(sock: str) -> Callable[[], Any]:
    def run() -> Any:
        with Client(sock, pin=False, allow_group=True, timeout=10) as c:
            st = c.call("status")
            assert c.welcome is not None
            return {"role": c.welcome.role, "uid": st["uid"]}
    return run


def test_only_root_and_the_service_account_reach_the_owner(short_home: Path) -> None:
    os.chown(short_home, NOBODY, NOBODY)  # system scope: the home is the account's
    owner = OwnerProcess(short_home, args=("--service-account", "nobody")).start()
    try:
        paths = owner.paths
        ex, sock, db = os.stat(paths.dir), os.stat(paths.sock), os.stat(paths.db)
        assert (ex.st_uid, ex.st_gid, stat.S_IMODE(ex.st_mode)) == (0, NOBODY, 0o710)
        assert (sock.st_uid, sock.st_gid, stat.S_IMODE(sock.st_mode)) == (0, NOBODY, 0o660)
        assert (db.st_uid, stat.S_IMODE(db.st_mode)) == (0, 0o600)
        assert as_user(NOBODY, NOBODY, status_as_admin(paths.sock)) == {"role": "admin",
                                                                        "uid": 0}
        # the account passes through execution/ but can read nothing there
        assert as_user(NOBODY, NOBODY, lambda: Path(paths.db).read_bytes())["exc"] == \
            "PermissionError"
        # a stranger cannot even reach the socket ...
        assert as_user(STRANGER, STRANGER, status_as_admin(paths.sock))["exc"] == \
            "PermissionError"
        # ... and with the directories opened up by mistake the owner still refuses it
        os.chmod(short_home, 0o711)
        try:
            got = as_user(STRANGER, NOBODY, status_as_admin(paths.sock))
        finally:
            os.chmod(short_home, 0o700)
        assert got["code"] == "UNAUTHORIZED", got
        with Client(paths.sock, pin=False, allow_group=True) as c:  # root: admin
            assert c.call("status")["uid"] == 0
    finally:
        assert owner.stop() == 0
    assert owner.stderr_path is not None
    log = owner.stderr_path.read_text()
    assert f"refused uid={STRANGER} gid={NOBODY}" in log


def test_a_service_account_that_does_not_exist_stops_the_start(short_home: Path) -> None:
    res = OwnerProcess(short_home).run_exit("serve", "--service-account", "tn-no-such-acct")
    assert res.returncode == 2 and "does not exist" in res.stderr
