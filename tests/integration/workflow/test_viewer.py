"""Roles: with `[settings] viewer_group`, a member of that group (here uid nobody with the
group as a supplementary group, in a forked child) can use `status` and `logs` — through
the API and through the `tenure` CLI — but not `stop`; the admin keeps everything."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# imported before the fork: uid nobody cannot read the interpreter's files afterwards
import backend.cli.commands
import backend.cli.logs
import backend.cli.main
import backend.cli.render
import units.model
import units.trust  # noqa: F401  (the CLI imports it to read the record)
from owner.testing import in_child_as, scratch_group
from protocol.client import Client

NOBODY = 65534


@pytest.fixture
def viewer_group() -> Iterator[tuple[str, int]]:
    with scratch_group("tnv") as group:
        yield group


def as_viewer(gid: int, fn: Callable[[], Any]) -> Any:
    """``fn`` in a forked child as uid nobody with ``gid`` as its only supplementary
    group."""
    return in_child_as(NOBODY, NOBODY, fn, groups=(gid,))


def api_call(sock: str, method: str, params: dict[str, Any]) -> Callable[[], Any]:
    def run() -> Any:
        with Client(sock, role="viewer", pin=False, allow_group=True, timeout=10) as c:
            return {"ok": c.call(method, params)}
    return run


def cli_call(home: str, *args: str) -> Callable[[], Any]:
    """The real CLI entry point, in the (already forked) viewer process."""
    def run() -> Any:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            code = backend.cli.main.main(["--home", home, "--json", *args])
        return {"code": code, "out": buf.getvalue()}
    return run


def config(group: str) -> str:
    return f"""
[settings]
viewer_group = "{group}"

[stacks.v.apps.talker]
command = ["sh", "-c", "for i in 1 2 3 4 5; do echo line $i; done; exec sleep 1000"]
"""


def _summary(res: Any) -> str:
    return json.dumps(res)[:400]


def test_viewer_group_can_status_and_logs_but_not_stop(viewer_group, cluster):
    name, gid = viewer_group
    cluster.up(config(name))
    pid = cluster.wait_ready(1)["v/talker/0"]["pid"]
    cluster.wait(lambda: len(cluster.call("logs", {"stack": "v"})["records"]) >= 5, 10,
                 "the talker's lines")
    sock = str(cluster.layout.api_sock)

    st = as_viewer(gid, api_call(sock, "status", {}))
    assert "ok" in st, f"viewer cannot call status: {_summary(st)}"
    assert [a["key"] for a in st["ok"]["apps"]] == ["v/talker/0"]
    logs = as_viewer(gid, api_call(sock, "logs", {"stack": "v", "app": "talker"}))
    assert "ok" in logs, f"viewer cannot read logs: {_summary(logs)}"
    assert len(logs["ok"]["records"]) == 5
    stop = as_viewer(gid, api_call(sock, "stop", {"target": "v/talker"}))
    assert stop.get("code") == "UNAUTHORIZED", stop

    # the same through the CLI a viewer would type
    home = str(cluster.home)
    st = as_viewer(gid, cli_call(home, "status"))
    assert st.get("code") == 0, f"`tenure status` as a viewer: {_summary(st)}"
    assert [a["key"] for a in json.loads(st["out"])["apps"]] == ["v/talker/0"]
    lg = as_viewer(gid, cli_call(home, "logs", "v/talker", "-n", "3"))
    assert lg.get("code") == 0, f"`tenure logs` as a viewer: {_summary(lg)}"
    lines = [json.loads(x)["data"] for x in lg["out"].splitlines()]
    assert lines == ["line 3\n", "line 4\n", "line 5\n"] or \
        lines == ["line 3", "line 4", "line 5"], lines
    sp = as_viewer(gid, cli_call(home, "stop", "v/talker"))
    assert sp.get("code") == 1 and json.loads(sp["out"])["error"]["code"] == "UNAUTHORIZED", sp

    # a stranger (nobody without the group) gets nothing at all
    stranger = as_viewer(NOBODY, api_call(sock, "status", {}))
    assert "ok" not in stranger, stranger

    # nothing was stopped, and the admin still has everything
    row = cluster.apps()["v/talker/0"]
    assert row["ready"] and row["pid"] == pid
    assert cluster.cli("status").ok
    assert cluster.cli("stop", "v/talker").ok


def test_backend_handoff_keeps_working_with_a_viewer_group(viewer_group, cluster):
    name, gid = viewer_group
    cluster.up(config(name))
    before = cluster.pids()
    release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    up = cluster.cli("backend", "upgrade", release, timeout=300)
    assert up.ok and up.out["activation"]["phase"] == "complete", \
        json.dumps(up.out.get("activation") if isinstance(up.out, dict) else up.out)[:600]
    assert cluster.pids() == before
    st = cluster.cli("status")
    assert st.ok, st
    viewer = as_viewer(gid, api_call(str(cluster.layout.api_sock), "status", {}))
    assert "ok" in viewer, _summary(viewer)


@pytest.fixture
def etc_dir() -> Iterator[Path]:
    """A directory like /etc/tenure: root's alone, readable by everyone."""
    path = Path(tempfile.mkdtemp(prefix="tne", dir="/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_a_viewer_trusts_the_socket_of_the_recorded_service_account(
        viewer_group, cluster, etc_dir):
    """System scope: api.sock belongs to the service account, which is neither the
    viewer nor root. The viewer's CLI accepts it only because root recorded that account
    for this home at install (here the account is `daemon`; the backend still runs as
    root, only the socket's owner matters to the client)."""
    from units.trust import write_record
    name, gid = viewer_group
    cluster.up(config(name))
    sock, home = str(cluster.layout.api_sock), str(cluster.home)
    account = pwd.getpwnam("daemon")
    record = etc_dir / "installation.json"

    def cli_with_record(*args: str) -> Callable[[], Any]:
        run = cli_call(home, *args)

        def with_env() -> Any:
            os.environ["TENURE_INSTALLATION_RECORD"] = str(record)
            return run()
        return with_env

    os.chown(sock, account.pw_uid, -1)
    try:
        refused = as_viewer(gid, cli_with_record("status"))  # no record yet
        assert json.loads(refused["out"])["error"]["code"] == "UNSAFE_PATH", refused
        write_record(record, scope="system", home=Path("/elsewhere"), user="daemon",
                     group="daemon")
        other = as_viewer(gid, cli_with_record("status"))  # a record for another home
        assert json.loads(other["out"])["error"]["code"] == "UNSAFE_PATH", other
        write_record(record, scope="system", home=cluster.home, user="daemon",
                     group="daemon")
        st = as_viewer(gid, cli_with_record("status"))
        assert st.get("code") == 0, _summary(st)
        assert [a["key"] for a in json.loads(st["out"])["apps"]] == ["v/talker/0"]
        sp = as_viewer(gid, cli_with_record("stop", "v/talker"))
        assert json.loads(sp["out"])["error"]["code"] == "UNAUTHORIZED", sp
    finally:
        os.chown(sock, 0, -1)
    assert cluster.apps()["v/talker/0"]["ready"]
