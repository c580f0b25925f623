"""`tenure down` and `tenure up` after a daemon was SIGKILLed, with real daemons.

Each of these once reported success over something still running, or adopted what
could never work again:
- the guardian killed: `down` stopped the owner and said "clean" while the backend ran
  on (and a second `down` said "nothing was running");
- the guardian and the owner killed, the owner reconciled, `up`: the new guardian
  adopted the old backend, whose grant names the dead owner instance: `status` said
  OWNER-CHANGED (exit 5) forever, with no applications;
- the owner killed: `down` stopped the guardian and exited 0 (`--json`: ``{}``) while
  the applications ran on under init;
- the owner killed, the guardian and its backend running: `tenure logs` answered
  OWNER_UNAVAILABLE, and what the apps wrote until then could not be read.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from backend.testing import Cluster
from protocol.procfs import running, start_ticks

CONFIG = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\nrestart = "always"\n'


def _kill9(pid: int) -> None:
    """SIGKILL ``pid`` and wait until it is gone (or a zombie nobody reaped yet)."""
    ticks = start_ticks(pid)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while ticks is not None and running(pid, ticks) and time.monotonic() < deadline:
        time.sleep(0.02)


def _daemons(cluster: Cluster) -> dict[str, Any]:
    """pid and start ticks of the owner, the guardian and the backend, and the owner's
    instance."""
    st = cluster.cli("backend", "status", check=True).out
    backend = cluster.backend_pid()
    return {"owner": st["owner"]["pid"], "owner_instance": st["owner"]["instance"],
            "guardian": st["guardian"]["pid"], "backend": backend,
            "backend_ticks": start_ticks(backend)}


def _app(cluster: Cluster) -> tuple[int, int]:
    [(pid, ticks)] = cluster.pids().values()
    return pid, ticks


def _reconcile(cluster: Cluster) -> None:
    """The guided reconcile of docs/reconcile.md: seal, then stop exactly those."""
    plan = cluster.cli("owner", "reconcile", "--prepare", check=True).out
    cluster.cli("owner", "reconcile", "--drain", plan["digest"], check=True)


def _down_text(cluster: Cluster) -> subprocess.CompletedProcess[str]:
    """`tenure down` with human output."""
    return subprocess.run(
        [sys.executable, "-m", "backend.cli.main", "--home", str(cluster.home), "down"],
        capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


def test_down_stops_a_backend_whose_guardian_was_killed(cluster):
    """Was: `owner: stopped … owner shutdown clean`, exit 0, the backend still alive
    and relaunching against the stopped owner; a second `down`: nothing was running."""
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    d = _daemons(cluster)
    _kill9(d["guardian"])
    down = _down_text(cluster)
    assert down.returncode == 0, down
    assert down.stdout.splitlines() == [
        "backend: stopped (it ran without a guardian)", "owner: stopped",
        "applications stopped: 1", "owner shutdown clean"], down.stdout
    assert not running(d["backend"], d["backend_ticks"])
    again = cluster.down()
    assert again.ok and again.out == {}, again   # nothing was running, truly
    assert cluster.leftovers() == []


def test_down_stops_a_backend_left_alone_and_refuses_over_a_dead_owner(cluster):
    """Guardian and owner killed: the backend is stopped, and `down` fails with
    RECONCILE_REQUIRED (the applications run on)."""
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    d = _daemons(cluster)
    app = _app(cluster)
    _kill9(d["guardian"])
    _kill9(d["owner"])
    down = cluster.down()
    assert down.code == 1 and down.out["error"]["code"] == "RECONCILE_REQUIRED", down
    assert down.out["error"]["data"]["stopped"] == {"backend": True}, down.out
    assert not running(d["backend"], d["backend_ticks"])
    assert running(*app)   # down never kills what the dead owner left: reconcile does
    _reconcile(cluster)
    assert not running(*app)
    assert cluster.down().out == {}


def test_down_after_the_owner_was_killed_says_its_applications_may_run(cluster):
    """Was: `guardian: stopped`, exit 0 (`--json`: {}), `sleep` still running under
    init."""
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    d = _daemons(cluster)
    app = _app(cluster)
    _kill9(d["owner"])
    down = _down_text(cluster)
    assert down.returncode == 1 and down.stdout == "", down
    assert down.stderr.startswith(
        f"tenure: RECONCILE_REQUIRED: the owner (instance {d['owner_instance']}, pid "
        f"{d['owner']}) died without a clean stop: its receipt says running on this "
        "boot, so its applications may still run"), down.stderr
    assert "Stopped: guardian. " in down.stderr
    assert "`tenure owner reconcile --prepare`" in down.stderr, down.stderr
    assert "docs/reconcile.md" in down.stderr
    assert running(*app)
    # nothing runs of tenure now; it still says so, as a coded error object
    again = cluster.down()
    assert again.code == 1, again
    err = again.out["error"]
    assert err["code"] == "RECONCILE_REQUIRED", again.out
    assert err["data"]["previous"] == d["owner_instance"] and err["data"]["stopped"] == {}
    assert err["data"]["receipt"] == "running"
    _reconcile(cluster)   # its launches proven gone: nothing is left to report
    assert not running(*app)
    done = cluster.down()
    assert done.ok and done.out == {}, done


def _kill_all_but_backend_and_reconcile(cluster: Cluster) -> dict[str, Any]:
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    d = _daemons(cluster)
    _kill9(d["guardian"])
    _kill9(d["owner"])
    _reconcile(cluster)
    return d


def test_guardian_retires_a_backend_fenced_for_a_dead_owner_instance(cluster):
    """docs/reconcile.md step 5 without a guardian: `up` starts one "which does the
    same". Was: it adopted the old backend; `status` said OWNER-CHANGED forever."""
    d = _kill_all_but_backend_and_reconcile(cluster)
    assert running(d["backend"], d["backend_ticks"])   # it outlived both
    cluster.up()

    def replaced() -> bool:
        st = cluster.cli("status")
        return st.code == 0 and st.out["backend"]["pid"] != d["backend"]
    cluster.wait(replaced, 30, "a current status from a new generation")
    st = cluster.cli("status", check=True).out
    assert st["backend"]["pid"] != d["backend"] and st["owner_link"]["current"], st
    assert st["owner"]["instance"] != d["owner_instance"]
    assert not running(d["backend"], d["backend_ticks"])   # stopped, by its pid
    cluster.wait_ready(1)   # restart = "always": back under the new owner
    with cluster.guardian() as g:
        act = g.call("receipts", {"activation": st["backend"]["activation"]})
    retired = act["receipts"][0]["detail"]["retired_at_start"]
    assert retired["pid"] == d["backend"], retired
    assert retired["reason"].startswith(
        f"it is attached to owner instance {d['owner_instance']} (pid {d['owner']}), "
        "not to the owner running now"), retired
    assert "retiring generation" in cluster.log("guardian")


def test_up_after_reconcile_applies_to_the_generation_the_guardian_keeps(cluster):
    """`up --config` right after the reconcile: was TRANSPORT_LOST (its plan went to
    the old backend as the new guardian retired it) or, before that, an apply on a
    backend attached to a dead owner."""
    d = _kill_all_but_backend_and_reconcile(cluster)
    up = cluster.up(CONFIG)
    st = up.out["status"]
    assert st["backend"]["pid"] != d["backend"] and st["owner_link"]["current"], st
    assert up.out["apply"]["operation"]["outcome"] in ("success", "no-change"), up.out


def test_logs_of_a_killed_owner_are_read_from_the_file_while_the_backend_runs(cluster):
    """Was: `tenure: OWNER_UNAVAILABLE ...`, exit 3, nothing printed."""
    cluster.up('[stacks.s.apps.a]\ncommand = ["sh", "-c", '
               '"echo first; echo second; exec sleep 100000"]\n')
    cluster.wait_ready(1)
    cluster.wait(lambda: cluster.cli_text("logs", "s/a").endswith("s/a/0: second\n"))
    d = _daemons(cluster)
    _kill9(d["owner"])
    ran = subprocess.run(
        [sys.executable, "-m", "backend.cli.main", "--home", str(cluster.home), "logs",
         "s/a"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert cluster.backend_pid() == d["backend"]   # the backend answered all along
    assert ran.returncode == 0, ran
    assert ran.stdout == "s/a/0: first\ns/a/0: second\n"
    assert ran.stderr == (f"tenure: logs: the owner is not running: reading "
                          f"{cluster.layout.journal} directly (what the apps wrote until "
                          "the owner stopped)\n"), ran.stderr
    _reconcile(cluster)
    assert cluster.down().code in (0, 1)
