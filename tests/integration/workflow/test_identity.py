"""An app that names its user runs as that user, with that user's HOME, USER and LOGNAME,
its umask and limits, and can report readiness over NOTIFY_SOCKET; `tenure inspect` shows
them; a plan naming a user that does not exist is refused with the line (a whole tenure,
as root)."""

from __future__ import annotations

import os
import pwd
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.root

NOBODY = pwd.getpwnam("nobody")
REPORT = ('echo "$(id -u) $(id -g) $(id -G) $(umask) $(ulimit -n) $HOME $USER $LOGNAME '
          '$(pwd)"; exec sleep infinity')
CONFIG = f"""
[stacks.id.apps.who]
command = ["sh", "-c", {REPORT!r}]
user = "nobody"
umask = "0027"
limits = {{ nofile = 200, core = 0 }}

[stacks.id.apps.plain]
command = ["sleep", "infinity"]

# notify readiness from another user: the root owner's notify address is abstract, since
# nobody cannot enter the private state directory where a socket file would be
[stacks.id.apps.notifier]
command = ["sh", "-c", "systemd-notify --ready; exec sleep infinity"]
user = "nobody"
ready = {{ kind = "notify", timeout = 30 }}
"""


def first_line(cluster: Any, app: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        recs = cluster.call("logs", {"stack": "id", "app": app, "limit": 10})["records"]
        if recs:
            return str(recs[0]["data"].decode())
        time.sleep(0.05)
    raise AssertionError(f"{app} printed nothing")


def _proc_ids(pid: int) -> dict[str, list[int]]:
    """Uid, Gid (real, effective, saved, fs) and Groups of a live process."""
    fields = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines())
    return {k: [int(v) for v in fields[k].split()] for k in ("Uid", "Gid", "Groups")}


def test_an_app_runs_as_its_user_and_inspect_shows_it(cluster: Any) -> None:
    cluster.up(CONFIG)
    apps = cluster.wait_ready(3)
    assert apps["id/notifier/0"]["ready"]
    groups = " ".join(str(g) for g in os.getgrouplist("nobody", NOBODY.pw_gid))
    assert first_line(cluster, "who") == (
        f"{NOBODY.pw_uid} {NOBODY.pw_gid} {groups} 0027 200 {NOBODY.pw_dir} nobody nobody /")
    pid = apps["id/who/0"]["pid"]
    assert os.stat(f"/proc/{pid}").st_uid == NOBODY.pw_uid
    row = cluster.cli("inspect", "id/who", check=True).out["instances"][0]
    assert row["identity"]["user"] == "nobody" and row["identity"]["umask"] == "0027"
    assert row["identity"]["resolved"]["uid"] == NOBODY.pw_uid
    assert row["limits"] == {"nofile": 200, "core": 0}
    plain = cluster.cli("inspect", "id/plain", check=True).out["instances"][0]
    assert plain["identity"]["user"] is None and plain["limits"] == {}
    resolved = plain["identity"]["resolved"]    # the ids the process really has
    status = _proc_ids(apps["id/plain/0"]["pid"])
    assert (resolved["uid"], resolved["gid"]) == (status["Uid"][1], status["Gid"][1])
    assert set(resolved["groups"]) == {status["Gid"][1], *status["Groups"]}

    bad = cluster.write_config(CONFIG.replace('user = "nobody"', 'user = "tn-no-such-user"', 1),
                               "bad.toml")
    res = cluster.cli("plan", "--config", str(bad))
    assert res.code == 1, res
    err = res.out["error"]
    assert err["code"] == "CONFIG_INVALID"
    assert err["data"]["key"] == "stacks.id.apps.who.user" and err["data"]["line"] == 4
    assert cluster.apps()["id/who/0"]["pid"] == pid  # nothing changed
