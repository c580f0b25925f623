"""tenure installed as two systemd services in a real systemd (root only).

One scenario, in order, because every step builds on the previous one's state:
install → start → stack up → guardian restart → hot upgrade → backend SIGKILL → per-app
cgroups → owner maintenance stop → owner start and the stack back → owner SIGKILL, start
refused until reconcile.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.system.harness import CommandFailed, SystemdContainer

pytestmark = pytest.mark.root

VENV_BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"
TENURE = str(VENV_BIN / "tenure")
HOME = "/var/lib/tenure"
ENV = {"TENURE_HOME": HOME}
OWNER_CGROUP = "/system.slice/tenure-owner.service"
WAIT = 60.0  # upper bound of every wait; never a timing assertion

# Three apps: a plain sleeper, one that forks a grandchild (which must share its cgroup),
# and one with tcp readiness (the container has its own loopback).
STACK = """
[stacks.sys.apps.sleeper]
command = ["/bin/sleep", "infinity"]

[stacks.sys.apps.forker]
command = ["/bin/sh", "-c", "/bin/sleep infinity & exec /bin/sleep infinity"]

[stacks.sys.apps.web]
command = ["/usr/bin/python3", "-m", "http.server", "18080", "--bind", "127.0.0.1"]

[stacks.sys.apps.web.ready]
kind = "tcp"
host = "127.0.0.1"
port = 18080
timeout = 20
"""

PROC_TICKS = """
import json, sys
out = {}
for pid in sys.argv[1:]:
    try:
        data = open(f"/proc/{pid}/stat", "rb").read()
        cg = open(f"/proc/{pid}/cgroup").read()
    except OSError:
        out[pid] = None
        continue
    ticks = int(data[data.rindex(b")") + 2:].split()[19])
    line = [l for l in cg.splitlines() if l.startswith("0::")][0][3:]
    kids = open(f"/proc/{pid}/task/{pid}/children").read().split()
    out[pid] = {"ticks": ticks, "cgroup": line, "children": kids}
print(json.dumps(out))
"""


def tenure(c: SystemdContainer, *args: str, timeout: float = 120.0) -> Any:
    res = c.run(TENURE, "--json", *args, env=ENV, timeout=timeout, check=True)
    return res.json()


def procs(c: SystemdContainer, pids: list[int]) -> dict[str, Any]:
    res = c.run("/usr/bin/python3", "-c", PROC_TICKS, *map(str, pids), check=True)
    out: dict[str, Any] = json.loads(res.out)
    return out


def diagnostics(c: SystemdContainer) -> str:
    parts = []
    for argv in (["journalctl", "--no-pager", "-n", "80", "-u", "tenure.service",
                  "-u", "tenure-owner.service"],
                 [TENURE, "--json", "backend", "status"], [TENURE, "--json", "status"],
                 [TENURE, "--json", "owner", "status"],
                 ["sh", "-c", f"tail -n 30 $(find {HOME} -name '*.log') /dev/null"]):
        r = c.run(*argv, env=ENV, timeout=30)
        parts.append(f"$ {' '.join(argv)}\n{r.out[-6000:]}{r.err[-2000:]}")
    return "\n".join(parts)


def wait_quiet(probe: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if (got := probe()):
                return got
        except (CommandFailed, ValueError):
            pass
        time.sleep(0.25)
    return None


def wait_for(what: str, probe: Any, timeout: float = WAIT,
             c: SystemdContainer | None = None) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (CommandFailed, ValueError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(0.25)
    why = diagnostics(c) if c is not None else ""
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}\n{why}")


def ready_apps(c: SystemdContainer, n: int = 3) -> dict[str, Any] | None:
    res = c.run(TENURE, "--json", "status", env=ENV, timeout=30)
    if res.code != 0:
        return None
    st = res.json()
    apps = st.get("apps") or []
    if len(apps) == n and all(a["state"] == "ready" and a["pid"] for a in apps):
        return st
    return None


def snapshot(c: SystemdContainer) -> dict[str, tuple[int, int]]:
    """app key → (pid, start ticks), read through the CLI and /proc inside."""
    st = wait_for("all apps ready", lambda: ready_apps(c), c=c)
    pids = {a["key"]: a["pid"] for a in st["apps"]}
    info = procs(c, list(pids.values()))
    return {k: (pid, info[str(pid)]["ticks"]) for k, pid in pids.items()}


def backend_pid(c: SystemdContainer) -> int | None:
    res = c.run(TENURE, "--json", "status", env=ENV, timeout=30)
    return res.json()["backend"]["pid"] if res.code == 0 else None


def certified(c: SystemdContainer) -> bool:
    """The guardian recovers a backend only from a valid recovery certificate, which a
    quiet backend publishes every 5 s (ARCHITECTURE.md, crash recovery)."""
    res = c.run(TENURE, "--json", "backend", "status", env=ENV, timeout=30)
    return res.code == 0 and bool(res.json().get("certificate", {}).get("valid"))


def test_tenure_under_systemd(systemd_container: SystemdContainer) -> None:
    c = systemd_container
    t0 = time.monotonic()
    from backend.testing import seal_once
    release = seal_once(c.share)  # sealed on the host, read inside through the share
    (c.share / "stack.toml").write_text(STACK)
    timings: dict[str, float] = {"boot": c.boot_seconds}

    # -- install -------------------------------------------------------------------------
    plan = tenure(c, "service", "install", "--prepare", "--scope", "system",
                  "--user-account", "root")
    assert plan, plan
    plan_dir = f"{HOME}/runtime/supervision-plan"
    for name in ("plan.json", "tenure-owner.service", "tenure.service"):
        c.run("test", "-f", f"{plan_dir}/{name}", check=True)
    tenure(c, "service", "install")
    c.run("systemctl", "start", "tenure-owner.service", "tenure.service", check=True,
          timeout=WAIT)
    assert c.unit("tenure-owner.service")["ActiveState"] == "active"
    assert c.unit("tenure.service")["ActiveState"] == "active"

    # -- up detects the services' daemons and starts none of its own -----------------------
    up = tenure(c, "up", "--release", str(release), "--config", str(c.share / "stack.toml"),
                "--timeout", "60")
    assert up["started"] == {"owner": False, "guardian": False}, up["started"]
    before = snapshot(c)
    assert len(before) == 3
    timings["installed_and_up"] = time.monotonic() - t0

    # -- every app in its own cgroup under the owner's unit ---------------------------------
    owner_status = tenure(c, "owner", "status")
    assert owner_status["isolation"] == "cgroup", owner_status
    info = procs(c, [pid for pid, _ in before.values()])
    groups = {k: info[str(pid)]["cgroup"] for k, (pid, _) in before.items()}
    assert all(g.startswith(f"{OWNER_CGROUP}/apps/") for g in groups.values()), groups
    assert len(set(groups.values())) == 3, groups
    forker = before["sys/forker/0"][0]
    grandkids = info[str(forker)]["children"]
    assert grandkids, "the forker's grandchild is missing"
    assert procs(c, [int(grandkids[0])])[grandkids[0]]["cgroup"] == groups["sys/forker/0"]
    owner_main = int(c.unit("tenure-owner.service")["MainPID"])
    assert procs(c, [owner_main])[str(owner_main)]["cgroup"] == f"{OWNER_CGROUP}/owner"

    # -- guardian + backend restart: apps untouched ---------------------------------------
    wait_for("a recovery certificate", lambda: certified(c), c=c)
    old_backend = backend_pid(c)
    c.run("systemctl", "restart", "tenure.service", check=True, timeout=WAIT)
    wait_for("a new backend", lambda: backend_pid(c) not in (None, old_backend),
             c=c)
    assert snapshot(c) == before
    timings["guardian_restart"] = time.monotonic() - t0

    # -- hot upgrade under systemd: apps untouched -----------------------------------------
    rid = tenure(c, "backend", "status")["selector"]["current"]
    upgraded = tenure(c, "backend", "upgrade", rid)
    assert upgraded["activation"]["phase"] == "complete", upgraded["activation"]
    assert snapshot(c) == before
    timings["upgrade"] = time.monotonic() - t0

    # -- SIGKILL of the backend: the guardian restores it, apps untouched -------------------
    wait_for("a recovery certificate", lambda: certified(c), c=c)
    victim = backend_pid(c)
    assert victim is not None
    c.run("kill", "-9", str(victim), check=True)
    wait_for("the restored backend", lambda: backend_pid(c) not in (None, victim),
             c=c)
    assert snapshot(c) == before
    timings["backend_kill"] = time.monotonic() - t0

    # -- owner maintenance stop: apps stopped, clean receipt --------------------------------
    c.run("systemctl", "stop", "tenure-owner.service", check=True, timeout=WAIT)
    owner_unit = c.unit("tenure-owner.service")
    assert owner_unit["ActiveState"] == "inactive", owner_unit
    gone = procs(c, [pid for pid, _ in before.values()] + [int(grandkids[0])])
    assert all(v is None for v in gone.values()), gone
    receipt = json.loads(c.run("cat", f"{HOME}/execution/owner-receipt.json",
                               check=True).out)
    assert receipt["state"] == "clean", receipt
    timings["owner_stop"] = time.monotonic() - t0

    # -- owner start without reconciliation; the guardian follows the new owner ------------
    c.run("systemctl", "start", "tenure-owner.service", check=True, timeout=WAIT)
    assert c.unit("tenure-owner.service")["ActiveState"] == "active"
    # the guardian moves control to the new owner; its backend starts the stack again
    wait_for("a backend on the new owner", lambda: backend_pid(c) is not None, c=c)
    ok = wait_quiet(lambda: ready_apps(c), 30.0)
    assert ok, diagnostics(c)
    after = snapshot(c)
    assert set(after) == set(before)
    assert all(after[k][0] != before[k][0] for k in after)
    timings["owner_start_stack_back"] = time.monotonic() - t0

    # -- owner SIGKILL: the next start refuses until reconcile proves the apps gone -------
    survivors = [a["pid"] for a in ready_apps(c)["apps"]]  # type: ignore[index]
    owner_pid = int(c.unit("tenure-owner.service")["MainPID"])
    c.run("kill", "-9", str(owner_pid), check=True)
    wait_for("the owner unit to stop", lambda: c.unit("tenure-owner.service")[
        "ActiveState"] in ("inactive", "failed"), c=c)
    assert all(v is not None for v in procs(c, survivors).values())  # apps outlive it
    refused = c.run("systemctl", "start", "tenure-owner.service", timeout=WAIT)
    assert refused.code != 0, refused
    assert c.unit("tenure-owner.service")["ActiveState"] != "active"
    alive = c.run(TENURE, "--json", "owner", "reconcile", env=ENV, timeout=WAIT)
    assert alive.code == 4 and "PROCESSES_ALIVE" in alive.out, alive
    listed = {p for s in json.loads(alive.out)["data"]["survivors"] for p in s["pids"]}
    assert set(survivors) <= listed  # every app leader is named (the grandchild too)
    for _round in range(3):  # the operator stops what reconcile names, by pid
        c.run("kill", "-9", *map(str, listed), check=True)
        pids = sorted(listed)
        wait_for("the listed processes to be gone", lambda pids=pids: all(
            v is None for v in procs(c, pids).values()), c=c)
        reconciled = c.run(TENURE, "--json", "owner", "reconcile", env=ENV, timeout=WAIT)
        if reconciled.code == 0:
            break
        listed = {p for s in json.loads(reconciled.out)["data"]["survivors"]
                  for p in s["pids"]}
    assert reconciled.code == 0, reconciled
    c.run("systemctl", "reset-failed", "tenure-owner.service")
    c.run("systemctl", "start", "tenure-owner.service", check=True, timeout=WAIT)
    assert c.unit("tenure-owner.service")["ActiveState"] == "active"
    assert wait_quiet(lambda: ready_apps(c), 30.0), diagnostics(c)
    timings["owner_sigkill_reconciled"] = time.monotonic() - t0
    print("system test timings (s since start):",
          {k: round(v, 1) for k, v in timings.items()})
