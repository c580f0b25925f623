"""What an app says it does (``STATUS=`` on NOTIFY_SOCKET, as systemctl status shows it):
the last text of its running launch, in status's DETAIL and inspect's ``app status``,
kept across a hot upgrade (the owner's inventory carries it) and gone with the run that
said it. Terminal controls in it are written out, never sent to the terminal."""

from __future__ import annotations

import json

SCRIPT = """
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
to = os.environ["NOTIFY_SOCKET"]
to = chr(0) + to[1:] if to.startswith("@") else to   # abstract, as sd_notify reads it
say = lambda text: s.sendto(text.encode(), to)
if os.path.exists(sys.argv[1]):   # a later run says nothing
    say("READY=1")
else:
    open(sys.argv[1], "w").close()
    say("READY=1\\nSTATUS=warming up")
    time.sleep(0.2)
    say("STATUS=serving 3 clients \\x1b[31m")
time.sleep(100000)
"""


def _config(mark: str) -> str:
    return (f'[stacks.s.apps.a]\ncommand = ["python3", "-c", {json.dumps(SCRIPT)}, '
            f'"{mark}"]\nready = {{ kind = "notify" }}\n')


def _said(cluster) -> str | None:
    return cluster.apps()["s/a/0"].get("status_text")


def test_an_apps_status_text_is_shown_kept_across_an_upgrade_and_gone_with_its_run(
        cluster):
    cluster.up(_config(str(cluster.home / "said")))
    cluster.wait(lambda: _said(cluster) == "serving 3 clients \x1b[31m", what="status text")
    shown = cluster.cli_text("status")
    assert '"serving 3 clients \\x1b[31m"' in shown and "\x1b" not in shown, shown
    text = cluster.cli_text("inspect", "s/a")
    assert 'app status:        "serving 3 clients \\x1b[31m"' in text, text

    pid = cluster.apps()["s/a/0"]["pid"]
    rid = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    act = cluster.cli("backend", "upgrade", rid, check=True).out["activation"]
    assert act["outcome"] == "success", act
    row = cluster.apps()["s/a/0"]
    assert (row["pid"], row["status_text"]) == (pid, "serving 3 clients \x1b[31m")

    cluster.cli("restart", "s/a", check=True)
    cluster.wait(lambda: cluster.apps()["s/a/0"]["pid"] not in (None, pid)
                 and cluster.apps()["s/a/0"]["ready"], what="restarted")
    assert _said(cluster) is None
    assert "app status:        -" in cluster.cli_text("inspect", "s/a")
