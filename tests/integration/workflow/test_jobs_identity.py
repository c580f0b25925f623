"""A job template that names its user runs as that user, like an app: its process has
the user's uid, HOME and umask; `tenure job show` names the user; a plan naming an
unknown user is refused with the template's line (a whole tenure, as root)."""

from __future__ import annotations

import pwd
from typing import Any

import pytest

from backend.cli.jobs import render_show

pytestmark = pytest.mark.root

NOBODY = pwd.getpwnam("nobody")
CONFIG = """
[stacks.id.jobs.who]
command = ["sh", "-c", "echo $(id -u) $(id -g) $(umask) $HOME $USER"]
user = "nobody"
umask = "0027"

[stacks.id.jobs.plain]
command = ["sh", "-c", "id -u"]
"""


def output(cluster: Any, job_id: int) -> list[str]:
    recs = cluster.call("logs", {"stack": "id", "app": "job:who" if job_id == 1 else
                                 "job:plain", "instance": job_id, "limit": 10})["records"]
    return [r["data"].decode() for r in recs]


def test_a_job_runs_as_its_user_and_show_names_it(cluster: Any) -> None:
    cluster.up(CONFIG)
    res = cluster.cli("job", "run", "id/who", "--wait", check=True)
    job = res.out["job"]
    assert (job["id"], job["state"]) == (1, "succeeded"), job
    assert job["identity"] == {"user": "nobody", "umask": 0o027}
    cluster.wait(lambda: bool(output(cluster, 1)), 10, "its output")
    assert output(cluster, 1) == [
        f"{NOBODY.pw_uid} {NOBODY.pw_gid} 0027 {NOBODY.pw_dir} nobody"]
    shown = cluster.cli("job", "show", "1", check=True).out
    assert shown["identity"] == {"user": "nobody", "umask": 0o027}
    assert "  user:      nobody umask 0027\n" in render_show(shown)
    plain = cluster.cli("job", "run", "id/plain", "--wait", check=True).out["job"]
    cluster.wait(lambda: bool(output(cluster, plain["id"])), 10, "its output")
    assert output(cluster, plain["id"]) == ["0"]               # as the owner (root)

    bad = cluster.write_config(CONFIG.replace('user = "nobody"', 'user = "tn-no-such-user"'),
                               "bad.toml")
    res = cluster.cli("plan", "--config", str(bad))
    assert res.code == 1, res
    err = res.out["error"]
    assert err["code"] == "CONFIG_INVALID" and "unknown user" in err["msg"]
    assert (err["data"]["key"], err["data"]["line"]) == ("stacks.id.jobs.who.user", 4)
