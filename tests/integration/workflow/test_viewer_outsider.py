"""A backend running as a user outside the viewer group (a child forked as uid nobody in
no group; the test runs as root): the plan check refuses the group with its key and
line, and a generation that starts with such a config anyway (the account left the group
after the config was applied) shares nothing and serves its admin only, logging why.

A backend running as root can hand the socket to any group, so a root-run tenure never
meets either case; and a whole tenure runs as nobody only where nobody may execute the
interpreter, so the backend's own code runs here in the forked child."""

from __future__ import annotations

import logging
import os
import socket
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.config import parse_config
from backend.enforce import Host, check_config
from backend.generation import Generation
from owner.testing import in_child_as, scratch_group
from protocol.errors import ConfigInvalid
from protocol.layout import Layout
from protocol.sockets import PeerCred

pytestmark = pytest.mark.root

NOBODY = 65534
STRANGER = 4321  # a uid that is in the viewer group


def config(group: str) -> str:
    return f'[settings]\nviewer_group = "{group}"\n\n' \
           '[stacks.v.apps.a]\ncommand = ["sleep", "infinity"]\nuser = "root"\n'


@pytest.fixture
def group() -> Iterator[tuple[str, int]]:
    with scratch_group("tnv") as g:
        yield g


def plan(name: str) -> dict[str, Any]:
    """The backend's plan-time check, in this process, for an owner running as root."""
    text = config(name)
    try:
        check_config(parse_config(text, "/etc/tenure.toml"), text,
                     Host.of({"uid": 0, "cgroup_controllers": None}))
    except ConfigInvalid as e:
        return {"code": e.code_str, **e.data}
    return {"code": None}


def test_the_plan_refuses_a_viewer_group_the_backend_is_not_in(group):
    name, gid = group
    got = in_child_as(NOBODY, NOBODY, lambda: plan(name))
    assert got["code"] == "CONFIG_INVALID", got
    assert (got["file"], got["key"], got["line"]) == \
        ("/etc/tenure.toml", "settings.viewer_group", 2), got
    assert got["problem"] == (
        f"the backend runs as nobody, which is not a member of group {name!r}, so it "
        f"cannot give the group the API socket; add it (usermod -aG {name} nobody) and "
        "restart tenure.service")
    # a member may name it
    assert in_child_as(NOBODY, NOBODY, lambda: plan(name), groups=(gid,)) == {"code": None}


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def start_sharing(home: Path, name: str, gid: int) -> dict[str, Any]:
    """A generation's share_api with ``name`` as the viewer group, on a bound api.sock;
    what it logged, the modes it left and whom it admits."""
    layout = Layout(home)
    os.mkdir(layout.backend, 0o700)
    logged = Lines()
    logging.getLogger("tenure.backend").addHandler(logged)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(layout.api_sock))
        gen = Generation(home, "act-test")
        gen.config = parse_config(config(name), "tenure.toml")
        gen.server = types.SimpleNamespace(authorize=None)  # type: ignore[assignment]
        gen.share_api()
        authorize = gen.server.authorize
        return {"log": logged.lines,
                "modes": [os.stat(p).st_mode & 0o777
                          for p in (layout.home, layout.backend, layout.api_sock)],
                "viewer": authorize(PeerCred(os.getpid(), STRANGER, gid)),
                "admin": authorize(PeerCred(os.getpid(), NOBODY, NOBODY))}


def test_a_generation_outside_the_viewer_group_serves_its_admin_only(group, short_home):
    name, gid = group
    os.chown(short_home, NOBODY, NOBODY)
    got = in_child_as(NOBODY, NOBODY, lambda: start_sharing(short_home, name, gid))
    assert got.get("exc") is None, got  # the generation carries on
    assert got["log"] == [f"cannot share the API with group {gid} ([Errno 1] Operation not "
                          f"permitted: '{short_home}'); admin only"], got
    assert got["modes"] == [0o700, 0o700, 0o600]
    assert (got["viewer"], got["admin"]) == (None, "admin")
