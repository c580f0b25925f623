"""tenure installed as two systemd services in a real systemd (root only).

One scenario, in order, because every step builds on the previous one's state:
accounts → install (system scope, unprivileged service account, reviewed digest) → start
→ stack up with apps as two other users → privileges (who runs as whom, modes, an app
that tries to reach the control plane, a viewer that can status but not stop) → per-app
cgroups and limits → guardian restart → hot upgrade → guardian upgrade (and a unit
restart that follows it) → owner maintenance window (`tenure owner upgrade`) → a window
to an owner that cannot start, reverted → backend SIGKILL → owner maintenance stop →
owner start and the
stack back → owner SIGKILL, start refused until reconcile.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.system.harness import CommandFailed, SystemdContainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "guardian"))
from test_handoff_support import derive_release

pytestmark = pytest.mark.root

VENV_BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"
TENURE = str(VENV_BIN / "tenure")
HOME = "/var/lib/tenure"
ENV = {"TENURE_HOME": HOME}
OWNER_CGROUP = "/system.slice/tenure-owner.service"
WAIT = 60.0  # upper bound of every wait; never a timing assertion

ACCOUNT = "tenure"        # the service account: guardian and backends
APP_USERS = ("tnapp1", "tnapp2")
VIEWER, VIEW_GROUP = "tnviewer", "tnview"

# Four apps, each as one of two users: a plain sleeper (with cgroup limits), one that
# forks a grandchild (which must share its cgroup), one with tcp readiness (the container
# has its own loopback), and a probe that tries to reach the control plane.
PROBE = r"""
import errno, json, os, signal, socket
home = "/var/lib/tenure"
def attempt(fn):
    try:
        return fn()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
def connect(path):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        return "connected"
def daemons():
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        cmd = attempt(lambda: open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0"))
        if not isinstance(cmd, list):
            continue
        for mod in (b"owner", b"guardian"):   # installed code, or run from a release
            if (b"-m" in cmd and mod in cmd) or \
                    any(b"run_module('" + mod + b"'" in a for a in cmd):
                found[mod.decode()] = int(pid)
        if any(b"run_module('backend'" in a for a in cmd) and b"--activation" in cmd:
            found["backend"] = int(pid)  # a generation runs from its sealed release
    return found
names = ["execution/owner.sock", "runtime/guardian.sock", "backend/api.sock"]
files = ["execution/owner.db", "execution/journal.db", "execution/guardian.pub",
         "runtime/state.db", "runtime/guardian.key",
         "runtime/handoffs",  # the handoff records (their names are not known here)
         "backend/backend.db", "backend/recovery.db"]
out = {"uid": os.getuid(), "groups": os.getgroups(),
       "socks": {n: attempt(lambda: connect(f"{home}/{n}")) for n in names},
       "files": {n: attempt(lambda: open(f"{home}/{n}", "rb").close() or "read")
                 for n in files},
       "signals": {k: attempt(lambda: os.kill(v, 0) or "delivered")
                   for k, v in daemons().items()}}
print(json.dumps(out), flush=True)
signal.pause()
"""

STACK = f"""
[settings]
viewer_group = "{VIEW_GROUP}"

[stacks.sys.apps.sleeper]
command = ["/bin/sleep", "infinity"]
user = "tnapp1"
limits = {{ nofile = 512 }}

[stacks.sys.apps.forker]
command = ["/bin/sh", "-c", "/bin/sleep infinity & exec /bin/sleep infinity"]
user = "tnapp2"

[stacks.sys.apps.web]
command = ["/usr/bin/python3", "-m", "http.server", "18080", "--bind", "127.0.0.1"]
user = "tnapp1"

[stacks.sys.apps.web.ready]
kind = "tcp"
host = "127.0.0.1"
port = 18080
timeout = 20

[stacks.sys.apps.probe]
command = {json.dumps(["/usr/bin/python3", "-c", PROBE])}
user = "tnapp2"
umask = "0077"
"""
N_APPS = 4

PROC_TICKS = """
import json, os, sys
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
    out[pid] = {"ticks": ticks, "cgroup": line, "children": kids,
                "uid": os.stat(f"/proc/{pid}").st_uid}
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


def ready_apps(c: SystemdContainer, n: int = N_APPS) -> dict[str, Any] | None:
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


def certified(c: SystemdContainer, since: float | None = None) -> bool:
    """The guardian recovers a backend only from a valid recovery certificate, which a
    quiet backend publishes every 5 s (ARCHITECTURE.md, crash recovery). With ``since``
    (a time.time()), only one published after it counts: right after a handoff the
    certificate on disk is the previous generation's, which the guardian rightly
    refuses as stale."""
    res = c.run(TENURE, "--json", "backend", "status", env=ENV, timeout=30)
    cert = res.json().get("certificate", {}) if res.code == 0 else {}
    fresh = since is None or float(cert.get("age", 1e9)) < time.time() - since
    return bool(cert.get("valid")) and fresh


def make_accounts(c: SystemdContainer) -> None:
    """The service account, two app users and a viewer, inside the container (its root
    is an overlay: nothing reaches the host). The project's interpreter lives under
    /root on these machines; /root gets search permission, in here only, so the
    service account can run it. The share's parent likewise, for the sealed release."""
    for argv in (["chmod", "0711", "/root"], ["chmod", "0755", str(c.workdir)],
                 ["useradd", "--system", "--no-create-home", "--home-dir", HOME,
                  "--shell", "/usr/sbin/nologin", ACCOUNT],
                 ["groupadd", VIEW_GROUP], ["usermod", "-aG", VIEW_GROUP, ACCOUNT],
                 ["useradd", "--no-create-home", "-G", VIEW_GROUP, VIEWER],
                 *(["useradd", "--no-create-home", u] for u in APP_USERS)):
        c.run(*argv, check=True)


def install_system_scope(c: SystemdContainer) -> None:
    """Prepare (root's plan directory, outside the home), review, install by digest."""
    plan = tenure(c, "service", "install", "--prepare", "--scope", "system")
    plan_dir = "/etc/tenure/supervision-plan"
    for name in ("plan.json", "tenure-owner.service", "tenure.service"):
        c.run("test", "-f", f"{plan_dir}/{name}", check=True)
    owner_unit = c.run("cat", f"{plan_dir}/tenure-owner.service", check=True).out
    guardian_unit = c.run("cat", f"{plan_dir}/tenure.service", check=True).out
    assert "User=root" in owner_unit and f"--service-account {ACCOUNT}" in owner_unit
    assert f"User={ACCOUNT}" in guardian_unit
    refused = c.run(TENURE, "--json", "service", "install", "--scope", "system", env=ENV)
    assert refused.code != 0 and "--digest" in refused.out, refused  # review first
    tenure(c, "service", "install", "--scope", "system", "--digest", plan["digest"])
    record = json.loads(c.run("cat", "/etc/tenure/installation.json", check=True).out)
    assert (record["home"], record["user"]) == (HOME, ACCOUNT)


def uid_of(c: SystemdContainer, user: str) -> int:
    return int(c.run("id", "-u", user, check=True).out)


def check_privileges(c: SystemdContainer, apps: dict[str, tuple[int, int]]) -> None:
    """Owner root, guardian and backend the account, apps their users; modes; and an
    app that tries every socket, private file and daemon is refused everywhere."""
    account = uid_of(c, ACCOUNT)
    owner, guardian = (int(c.unit(u)["MainPID"]) for u in ("tenure-owner.service",
                                                           "tenure.service"))
    backend = backend_pid(c)
    assert backend is not None
    daemons = procs(c, [owner, guardian, backend])
    assert [daemons[str(p)]["uid"] for p in (owner, guardian, backend)] == \
        [0, account, account]
    info = procs(c, [pid for pid, _ in apps.values()])
    users = {k: info[str(pid)]["uid"] for k, (pid, _) in apps.items()}
    t1, t2 = (uid_of(c, u) for u in APP_USERS)
    assert users == {"sys/sleeper/0": t1, "sys/web/0": t1, "sys/forker/0": t2,
                     "sys/probe/0": t2}, users
    modes = c.python(f"""
import json, os
out = {{}}
handoffs = ["runtime/handoffs/" + n for n in os.listdir({HOME!r} + "/runtime/handoffs")]
for rel in ("", "execution", "execution/owner.sock", "execution/owner.db",
            "execution/guardian.pub", "runtime", "runtime/guardian.key", "backend/api.sock",
            *handoffs):
    st = os.stat(os.path.join({HOME!r}, rel))
    out[rel] = [st.st_uid, oct(st.st_mode & 0o777)]
print(json.dumps(out))""")
    assert modes["execution"] == [0, "0o710"] and modes["execution/owner.sock"] == [0, "0o660"]
    assert modes["execution/owner.db"] == modes["execution/guardian.pub"] == [0, "0o600"]
    assert modes["runtime"] == [account, "0o700"]
    assert modes["runtime/guardian.key"] == [account, "0o600"]
    handoffs = [r for r in modes if r.startswith("runtime/handoffs/")]
    assert handoffs and all(modes[r] == [account, "0o600"] for r in handoffs), modes
    assert modes[""][0] == account
    probe = wait_for("the probe's report", lambda: probe_report(c), c=c)
    assert probe["uid"] == t2
    assert set(probe["socks"].values()) == {"EACCES"}, probe
    assert set(probe["files"].values()) == {"EACCES"}, probe
    assert set(probe["signals"]) == {"owner", "guardian", "backend"}, probe
    assert set(probe["signals"].values()) == {"EPERM"}, probe


def probe_report(c: SystemdContainer) -> dict[str, Any] | None:
    res = c.run(TENURE, "--json", "logs", "sys/probe", env=ENV, timeout=30)
    lines = [json.loads(x) for x in res.out.splitlines() if x.strip()] if res.code == 0 \
        else []
    out = [json.loads(r["data"]) for r in lines if r["stream"] == "stdout"]
    return out[0] if out else None


def check_viewer(c: SystemdContainer) -> None:
    """A member of the viewer group runs the ordinary CLI: status yes, stop no (and the
    refusal is logged by the backend)."""
    def as_viewer(*args: str) -> Any:
        res = c.run("runuser", "-u", VIEWER, "--", TENURE, "--json", *args, env=ENV,
                    timeout=60)
        return res.code, json.loads(res.out)
    code, st = as_viewer("status")
    assert code == 0 and len(st["apps"]) == N_APPS, st
    code, stop = as_viewer("stop", "sys/sleeper")
    assert code == 1 and stop["error"]["code"] == "UNAUTHORIZED", stop
    viewer = uid_of(c, VIEWER)
    logs = c.run("sh", "-c", f"cat {HOME}/logs/backend-*.log", check=True).out
    assert f"refused uid={viewer}" in logs
    assert ready_apps(c) is not None  # nothing was stopped


def test_tenure_under_systemd(systemd_container: SystemdContainer) -> None:
    c = systemd_container
    t0 = time.monotonic()
    from backend.testing import seal_once
    release = seal_once(c.share)  # sealed on the host, read inside through the share
    (c.share / "stack.toml").write_text(STACK)
    timings: dict[str, float] = {"boot": c.boot_seconds}

    # -- accounts and install ---------------------------------------------------------------
    make_accounts(c)
    install_system_scope(c)
    c.run("systemctl", "start", "tenure-owner.service", "tenure.service", check=True,
          timeout=WAIT)
    assert c.unit("tenure-owner.service")["ActiveState"] == "active"
    assert c.unit("tenure.service")["ActiveState"] == "active"

    # -- cgroup limits: enforced where the controllers exist, else a config error ---------
    controllers = set(c.run("cat", "/sys/fs/cgroup/cgroup.controllers").out.split())
    enforced = {"memory", "pids"} <= controllers
    limits = STACK.replace("limits = { nofile = 512 }", 'limits = { nofile = 512, '
                           'memory_max = "256M", pids_max = 64 }')
    (c.share / "limits.toml").write_text(limits)
    if not enforced:  # this host's cgroup2 hierarchy has no memory/pids controller
        refused = c.run(TENURE, "--json", "up", "--release", str(release), "--config",
                        str(c.share / "limits.toml"), "--timeout", "60", env=ENV,
                        timeout=120)
        err = json.loads(refused.out)["error"]
        assert refused.code == 1 and err["code"] == "CONFIG_INVALID", refused
        assert err["data"]["key"] == "stacks.sys.apps.sleeper.limits.memory_max", err

    # -- up detects the services' daemons and starts none of its own -----------------------
    config = c.share / ("limits.toml" if enforced else "stack.toml")
    up = tenure(c, "up", "--release", str(release), "--config", str(config),
                "--timeout", "60")
    assert up["started"] == {"owner": False, "guardian": False}, up["started"]
    # the services ran the installed code: the up that selected the first release (this
    # one, or the refused one above) moved both onto it
    first = tenure(c, "backend", "status")["selector"]["current"]
    code = tenure(c, "service", "status")["releases"]
    assert code == {"owner": first, "guardian": first, "backend": first}, code
    before = snapshot(c)
    assert len(before) == N_APPS
    timings["installed_and_up"] = time.monotonic() - t0

    # -- who runs as whom, and who can reach what -------------------------------------------
    check_privileges(c, before)
    check_viewer(c)
    timings["privileges"] = time.monotonic() - t0

    # -- every app in its own cgroup under the owner's unit, with its limits ---------------
    owner_status = tenure(c, "owner", "status")
    assert owner_status["isolation"] == "cgroup", owner_status
    info = procs(c, [pid for pid, _ in before.values()])
    groups = {k: info[str(pid)]["cgroup"] for k, (pid, _) in before.items()}
    assert all(g.startswith(f"{OWNER_CGROUP}/apps/") for g in groups.values()), groups
    assert len(set(groups.values())) == N_APPS, groups
    if enforced:
        limited = f"/sys/fs/cgroup{groups['sys/sleeper/0']}"
        assert c.run("cat", f"{limited}/memory.max", check=True).out.strip() == \
            str(256 << 20)
        assert c.run("cat", f"{limited}/pids.max", check=True).out.strip() == "64"
    print(f"cgroup limits {'enforced' if enforced else 'refused at plan time'} "
          f"(controllers here: {sorted(controllers)})")
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
    upgraded_at = time.time()
    upgraded = tenure(c, "backend", "upgrade", rid)
    assert upgraded["activation"]["phase"] == "complete", upgraded["activation"]
    assert snapshot(c) == before
    timings["upgrade"] = time.monotonic() - t0

    # -- guardian upgrade under systemd: same main pid, backend and apps untouched ---------
    derive_release(release, c.share / "second", {"guardian/__init__.py": lambda t: t + "#\n"})
    second = tenure(c, "release", "install", str(c.share / "second"))["release"]
    main_pid, kept = int(c.unit("tenure.service")["MainPID"]), backend_pid(c)
    moved = tenure(c, "guardian", "upgrade", second)
    assert moved["guardian_release"]["running"] == second, moved
    assert int(c.unit("tenure.service")["MainPID"]) == main_pid
    assert c.unit("tenure.service")["ActiveState"] == "active"
    assert backend_pid(c) == kept and snapshot(c) == before
    # a restart of the unit starts the installed code, which follows the recorded release
    c.run("systemctl", "restart", "tenure.service", check=True, timeout=WAIT)
    wait_for("the guardian back on its release", lambda: (tenure(c, "guardian", "status")[
        "guardian_release"] or {}).get("running") == second and backend_pid(c) not in
        (None, kept), c=c)
    assert snapshot(c) == before
    timings["guardian_upgrade"] = time.monotonic() - t0

    # -- owner maintenance window under systemd: the same apps back on the staged owner ----
    plan = tenure(c, "owner", "upgrade", second, "--dry-run")
    assert (plan["mode"], plan["instances"]) == ("systemd", N_APPS), plan
    upgraded_at = time.time()   # a certificate written after this vouches for the result
    done = tenure(c, "owner", "upgrade", second, "--digest", plan["digest"], timeout=300)
    assert done["step"] == "done", done
    assert tenure(c, "owner", "status")["release"] == {"running": second, "error": None}
    assert c.unit("tenure-owner.service")["ActiveState"] == "active"
    restored = snapshot(c)
    assert set(restored) == set(before)
    assert all(restored[k][0] != before[k][0] for k in before)
    before = restored    # the steps below compare with the apps the window restored
    code = tenure(c, "service", "status")["releases"]
    assert code == {"owner": second, "guardian": second, "backend": rid}, code
    timings["owner_window"] = time.monotonic() - t0

    # -- a window to an owner that cannot start: back on the release before, same apps -----
    derive_release(release, c.share / "broken", {"owner/__main__.py": lambda t: t.replace(
        "    from .release import follow, serve_args\n",
        "    raise RuntimeError('a broken owner release')\n", 1)})
    broken = tenure(c, "release", "install", str(c.share / "broken"))["release"]
    plan = tenure(c, "owner", "upgrade", broken, "--dry-run")
    res = c.run(TENURE, "--json", "owner", "upgrade", broken, "--digest", plan["digest"],
                env=ENV, timeout=300)
    err = res.json()["error"]
    assert res.code == 1 and err["code"] == "OWNER_UPGRADE_REVERTED", (res.out, res.err)
    assert err["data"]["log"] == "journalctl -u tenure-owner.service", err
    assert tenure(c, "owner", "status")["release"] == {"running": second, "error": None}
    assert c.unit("tenure-owner.service")["ActiveState"] == "active"
    reverted = snapshot(c)
    assert set(reverted) == set(before)
    before = reverted
    timings["owner_window_reverted"] = time.monotonic() - t0

    # -- SIGKILL of the backend: the guardian restores it, apps untouched -------------------
    wait_for("a recovery certificate", lambda: certified(c, upgraded_at), c=c)
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
