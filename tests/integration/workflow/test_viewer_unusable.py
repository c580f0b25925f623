"""A viewer group that cannot be used when a backend generation starts never stops the
generation: it serves its admin only, shares nothing with the group, and its log says why.
Here the group was deleted after the config was applied; then a new generation takes over
(a whole tenure, as root)."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from owner.testing import in_child_as, scratch_group
from protocol.client import Client

pytestmark = pytest.mark.root

NOBODY = 65534


def config(group: str) -> str:
    return f'[settings]\nviewer_group = "{group}"\n\n' \
           '[stacks.v.apps.a]\ncommand = ["sleep", "infinity"]\n'


def mode(path: Any) -> int:
    return os.stat(path).st_mode & 0o777


def viewer_status(sock: str) -> Any:
    def run() -> Any:
        with Client(sock, role="viewer", pin=False, allow_group=True, timeout=10) as c:
            return {"ok": c.call("status")}
    return run


def backend_logs(cluster: Any) -> str:
    return "".join(p.read_text() for p in (cluster.home / "logs").glob("backend-*.log"))


def test_a_deleted_viewer_group_leaves_the_next_generation_admin_only(cluster):
    layout = cluster.layout
    with scratch_group("tnv") as (name, gid):
        cluster.up(config(name))
        pid = cluster.wait_ready(1)["v/a/0"]["pid"]
        assert mode(layout.api_sock) == 0o660
        subprocess.run(["groupdel", name], check=True, capture_output=True)
        old = cluster.backend_pid()
        release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
        up = cluster.cli("backend", "upgrade", release, timeout=300)
        assert up.ok and up.out["activation"]["phase"] == "complete", up
        assert cluster.backend_pid() != old
        st = cluster.cli("status", check=True).out
        assert [(a["key"], a["pid"]) for a in st["apps"]] == [("v/a/0", pid)]
        assert (mode(layout.home), mode(layout.backend), mode(layout.api_sock)) == \
            (0o700, 0o700, 0o600)
        viewer = in_child_as(NOBODY, NOBODY, viewer_status(str(layout.api_sock)),
                             groups=(gid,))
    assert viewer.get("exc") == "PermissionError", viewer
    assert f"viewer group {name} does not exist; admin only" in backend_logs(cluster)
