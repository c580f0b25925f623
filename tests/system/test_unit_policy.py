"""What the two units' settings do in a real systemd (root only), each scenario in a
container of its own: a unit restart of the guardian right after an app changed, and a
guardian crash while the owner is stopped for maintenance.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.system.harness import SystemdContainer
from tests.system.test_systemd_service import (
    ENV,
    TENURE,
    WAIT,
    backend_pid,
    certified,
    diagnostics,
    install_system_scope,
    make_accounts,
    procs,
    tenure,
    wait_for,
)

pytestmark = pytest.mark.root

OWNER, GUARDIAN = "tenure-owner.service", "tenure.service"
STACK = """
[stacks.sys.apps.sleeper]
command = ["/bin/sleep", "infinity"]
user = "tnapp1"

[stacks.sys.apps.other]
command = ["/bin/sleep", "infinity"]
user = "tnapp2"
"""


def _apps(c: SystemdContainer) -> dict[str, Any]:
    """app key → its status entry."""
    return {a["key"]: a for a in tenure(c, "status").get("apps") or []}


def _running(c: SystemdContainer, n: int) -> dict[str, Any] | None:
    apps = _apps(c)
    ready = {k: a for k, a in apps.items() if a["state"] == "ready" and a["pid"]}
    return ready if len(ready) == n else None


def _installed_and_up(c: SystemdContainer) -> dict[str, int]:
    """Install, start both units, bring the stack up; app key → pid."""
    from backend.testing import seal_once
    release = seal_once(c.share)
    (c.share / "stack.toml").write_text(STACK)
    make_accounts(c)
    install_system_scope(c)
    c.run("systemctl", "start", OWNER, GUARDIAN, check=True, timeout=WAIT)
    tenure(c, "up", "--release", str(release), "--config", str(c.share / "stack.toml"),
           "--timeout", "60")
    apps = wait_for("both apps ready", lambda: _running(c, 2), c=c)
    return {k: a["pid"] for k, a in apps.items()}


def _journal(c: SystemdContainer) -> list[str]:
    return c.run("journalctl", "--no-pager", "-o", "cat", "-u", GUARDIAN,
                 check=True).out.splitlines()


def _recovery(c: SystemdContainer) -> str | None:
    res = c.run(TENURE, "--json", "backend", "status", env=ENV, timeout=30)
    return (res.json().get("recovery") or {}).get("state") if res.code == 0 else None


def test_guardian_restart_right_after_an_app_change_keeps_recovery_ready(
        systemd_container: SystemdContainer) -> None:
    """`systemctl restart tenure` just after `tenure stop APP`: systemd signals only the
    guardian (KillMode=mixed), which gets a fresh certificate from its backend and retires
    it; the next guardian recovers at once (was: systemd SIGTERMed the backend with the
    guardian, the certificate predated the stop, and recovery was blocked)."""
    c = systemd_container
    pids = _installed_and_up(c)
    wait_for("a recovery certificate", lambda: certified(c), c=c)
    seen = len(_journal(c))
    old_backend = backend_pid(c)
    stopped = tenure(c, "stop", "sys/sleeper")
    assert stopped, stopped
    c.run("systemctl", "restart", GUARDIAN, check=True, timeout=WAIT)
    wait_for("a new backend", lambda: backend_pid(c) not in (None, old_backend), c=c)
    assert wait_for("recovery ready", lambda: _recovery(c) == "ready", c=c)
    lines = _journal(c)[seen:]
    bad = [x for x in lines if "did not retire cleanly" in x or "recovery blocked" in x]
    assert not bad, "\n".join(lines)
    apps = _apps(c)
    assert apps["sys/other/0"]["pid"] == pids["sys/other/0"], apps
    assert apps["sys/sleeper/0"]["state"] == "stopped", apps


def test_guardian_crash_during_owner_maintenance_leaves_the_owner_stopped(
        systemd_container: SystemdContainer) -> None:
    """Runbook step 1 stops the owner; a guardian that crashes then is restarted, and
    the owner stays stopped until the operator starts it (was: Wants= pulled the owner,
    and every stack, back up within a second)."""
    c = systemd_container
    pids = _installed_and_up(c)
    c.run("systemctl", "stop", OWNER, check=True, timeout=WAIT)
    assert all(v is None for v in procs(c, list(pids.values())).values())
    crashed = int(c.unit(GUARDIAN)["MainPID"])
    c.run("kill", "-9", str(crashed), check=True)
    # restarted: it waits for an owner (activating) and serves its socket meanwhile
    wait_for("the guardian restarted", lambda: c.unit(GUARDIAN)["MainPID"] not in
             ("0", str(crashed)), c=c)
    deadline = time.monotonic() + 5.0   # the restart that pulled the owner took ~1 s
    while time.monotonic() < deadline:
        assert c.unit(OWNER)["ActiveState"] == "inactive", diagnostics(c)
        time.sleep(0.25)
    assert all(v is None for v in procs(c, list(pids.values())).values())
    c.run("systemctl", "start", OWNER, check=True, timeout=WAIT)
    back = wait_for("the stack back on the new owner", lambda: _running(c, 2), c=c)
    assert set(back) == set(pids)
    assert c.unit(GUARDIAN)["ActiveState"] == "active"


HAND_WRITTEN = """[Unit]
Description=a tenure.service of the operator's own

[Service]
ExecStart=/bin/sleep infinity

[Install]
WantedBy=multi-user.target
"""


def test_uninstall_removes_what_tenure_wrote_and_only_that(
        systemd_container: SystemdContainer) -> None:
    """After a stop of both units: the unit files, /etc/tenure's record and plan go; a
    hand-written tenure.service stays enabled (was: disabled and deleted, and the record
    and plan stayed)."""
    c = systemd_container
    make_accounts(c)
    install_system_scope(c)
    c.run("systemctl", "start", OWNER, GUARDIAN, check=True, timeout=WAIT)
    c.run("systemctl", "stop", GUARDIAN, OWNER, check=True, timeout=WAIT)
    done = tenure(c, "service", "uninstall", "--scope", "system")
    assert done["left"] == [], done
    assert {"/etc/systemd/system/tenure.service", "/etc/tenure/installation.json",
            "/etc/tenure/supervision-plan"} <= set(done["removed"]), done
    assert c.run("test", "-e", "/etc/tenure").code != 0
    assert c.unit(GUARDIAN).get("ActiveState") == "inactive"
    load = c.run("systemctl", "show", "-p", "LoadState", GUARDIAN, check=True).out
    assert load.strip() == "LoadState=not-found", load
    (c.share / "hand.service").write_text(HAND_WRITTEN)
    c.run("cp", str(c.share / "hand.service"), "/etc/systemd/system/tenure.service",
          check=True)
    c.run("systemctl", "enable", GUARDIAN, check=True)
    again = tenure(c, "service", "uninstall", "--scope", "system")
    assert [x["path"] for x in again["left"]] == ["/etc/systemd/system/tenure.service"]
    assert c.run("systemctl", "is-enabled", GUARDIAN).out.strip() == "enabled"
