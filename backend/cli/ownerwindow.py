"""``tenure owner upgrade [RELEASE|PATH] --dry-run | --digest D | --continue``: the owner
maintenance window.

The owner is the parent of every application, so replacing it stops them; this makes
that a reviewed, resumable procedure. The plan lists every instance that runs, in the
order it is stopped (reverse dependency order, stack by stack) and started again; its
digest is what the operator approves. Performing it walks :data:`STEPS`, recording the
plan and the last step done in ``execution/maintenance.json`` after every step, so a
failure stops with that state and ``--continue`` carries on from it:

==========  ==============================================================  ==========
step done   what the next step does                                         next
==========  ==============================================================  ==========
planned     copy the release into execution/releases for the owner          staged
staged      stop every planned instance through the backend, in order       drained
drained     stop the owner (systemctl, or SIGTERM); its receipt must be     stopped
            clean; record the owner's new release
stopped     start the owner (systemctl, or as `tenure up` does)             started
started     wait for the backend on the new owner; start the instances      restored
restored    verify: every planned instance up, the same stacks stopped      done
==========  ==============================================================  ==========

Stopping through the backend uses each app's own stop policy; the instances are marked
stopped there, so the backend that follows the new owner does not start them by itself
before the window starts them in order. Stacks stopped durably stay stopped: their
intents live in owner.db, which the new owner reads.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from protocol.client import Client
from protocol.durable import atomic_write_json, read_json
from protocol.errors import (
    BadRequest,
    MaintenanceIncomplete,
    NotFound,
    OperationInProgress,
    ReconcileRequired,
    ServiceError,
    StalePlan,
    StateCorrupt,
    TenureError,
)
from protocol.layout import Layout
from protocol.procfs import running

__all__ = ["APPS_DOWN", "KIND", "STEPS", "Step", "Window", "command", "held", "mode_of",
           "plan", "plan_text"]

KIND = "tenure-maintenance"
UNIT = "tenure-owner.service"


class Step(StrEnum):
    PLANNED = "planned"
    STAGED = "staged"
    DRAINED = "drained"
    STOPPED = "stopped"
    STARTED = "started"
    RESTORED = "restored"
    DONE = "done"


# the public states of instances the operator wants running (a window stops and starts
# them again); stopped and failed ones are left as they are
WANTED_UP = frozenset({"starting", "running", "ready", "backoff"})

# after these steps some planned instances may be down (a drain may have begun): no new
# window may begin before this one is carried on
APPS_DOWN = frozenset({Step.STAGED, Step.DRAINED, Step.STOPPED, Step.STARTED})


@dataclass
class Window:
    """What the steps need: the home, clients, the per-wait limit and a progress line."""

    layout: Layout
    api: Callable[..., Client]          # the backend (admin), ``api(timeout=...)``
    timeout: float
    say: Callable[[str], None]

    def owner_status(self) -> dict[str, Any] | None:
        from .daemons import ping
        return ping(self.layout.owner_sock, timeout=5.0, home=self.layout.home)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        with self.api(timeout=self.timeout + 30) as c:
            return c.call(method, params or {})

    def wait(self, what: str, probe: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + self.timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = probe()
            except TenureError as exc:
                last = exc
            else:
                if last:
                    return last
            time.sleep(0.1)
        raise MaintenanceIncomplete(f"{what} not reached within {self.timeout:.0f} s "
                                    f"(last: {last})", {"waiting_for": what})


# -- the plan ------------------------------------------------------------------------------

def plan(w: Window, release: str | None) -> dict[str, Any]:
    """What the window would do now (changes nothing). ``release`` None: restart the owner
    on the code it runs. Raises ConnectFailed/BackendUnavailable, NotFound."""
    owner = w.owner_status()
    if owner is None:
        raise NotFound("no owner answers on this home; `tenure up` starts one (a window "
                       "needs a running owner)")
    st, order = w.call("status"), w.call("order")
    up = {a["key"]: a for a in st["apps"] if a["state"] in WANTED_UP}
    stop: list[list[str]] = []
    for stack, layers in order["stacks"].items():
        for layer in reversed(layers):
            keys = sorted(k for k, a in up.items() if a["stack"] == stack and a["app"] in layer)
            if keys:
                stop.append(keys)
    current = (owner.get("release") or {}).get("running")
    ident = owner["owner"]
    body = {"owner": {k: ident[k] for k in ("instance", "pid", "start_ticks")},
            "from": current, "release": release or current, "mode": mode_of(ident["pid"]),
            "owner_uid": owner.get("uid", os.geteuid()),
            "stop": stop, "start": stop[::-1], "instances": sum(map(len, stop)),
            "stopped_stacks": order["stopped_stacks"]}
    return {**body, "digest": _digest(body)}


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def mode_of(pid: int) -> str:
    """``systemd``, ``systemd-user`` (the owner runs in tenure-owner.service) or
    ``standalone``."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            cgroup = f.read()
    except OSError:
        return "standalone"
    if f"/{UNIT}" not in cgroup:
        return "standalone"
    return "systemd-user" if "/user@" in cgroup else "systemd"


def plan_text(p: dict[str, Any], release_arg: str | None) -> str:
    owner = p["owner"]
    src = f"release {p['from'][:12]}" if p["from"] else "the installed code"
    dst = f"release {p['release'][:12]}" if p["release"] else "the installed code"
    lines = [f"owner maintenance window ({p['mode']}): owner {owner['instance']} "
             f"(pid {owner['pid']}), {src} -> {dst}"]
    if p["stop"]:
        lines.append(f"stops {p['instances']} instances with their stop policies, in this "
                     "order:")
        lines += [f"  {i}. {' '.join(level)}" for i, level in enumerate(p["stop"], 1)]
        lines.append("then restarts the owner and starts the same instances again, last "
                     "stopped first.")
    else:
        lines.append("no instance runs: only the owner restarts")
    if p["stopped_stacks"]:
        lines.append(f"stays stopped: {', '.join(p['stopped_stacks'])} (stack stopped)")
    lines.append(f"digest: {p['digest']}")
    arg = f"{p['release']} " if release_arg else ""   # the id: a path may change
    lines.append(f"to perform exactly this: tenure owner upgrade {arg}--digest {p['digest']}")
    return "\n".join(lines)


# -- the record ----------------------------------------------------------------------------

def load(layout: Layout) -> dict[str, Any] | None:
    """The window in progress or last done, or None. Raises StateCorrupt, UnsafePath."""
    try:
        rec = read_json(layout.maintenance, KIND)
    except FileNotFoundError:
        return None
    if rec.get("step") not in {s.value for s in Step} or not isinstance(rec.get("plan"), dict):
        raise StateCorrupt(f"{layout.maintenance} has no known step or no plan",
                           {"path": layout.maintenance})
    return rec


def _save(layout: Layout, rec: dict[str, Any]) -> None:
    atomic_write_json(layout.maintenance, {**rec, "kind": KIND, "format": 1,
                                           "updated_at": time.time()})


def begin(w: Window, p: dict[str, Any], digest: str) -> dict[str, Any]:
    """Record the reviewed plan (step ``planned``). Raises StalePlan when ``digest`` is not
    the plan's, MaintenanceIncomplete while another window is unfinished."""
    old = load(w.layout)
    if old is not None and old["step"] in APPS_DOWN:
        raise MaintenanceIncomplete(
            f"a maintenance window stopped after step {old['step']}, perhaps with "
            "applications stopped; finish it first: tenure owner upgrade --continue",
            {"step": old["step"]})
    if digest != p["digest"]:
        raise StalePlan("the owner, its apps or the release changed since the plan was "
                        "reviewed; run --dry-run again", {"reviewed": digest,
                                                          "current": p["digest"]})
    rec = {"plan": p, "step": str(Step.PLANNED), "progress": {}, "error": None,
           "started_at": time.time()}
    _save(w.layout, rec)
    return rec


def carry_on(w: Window, rec: dict[str, Any]) -> dict[str, Any]:
    """Perform the steps after ``rec['step']`` until ``done``. Raises
    MaintenanceIncomplete naming the last step done and why the next one failed."""
    while rec["step"] != Step.DONE:
        done = Step(rec["step"])
        nxt, fn = STEPS[done]
        try:
            fn(w, rec)
        except (TenureError, OSError, subprocess.SubprocessError) as exc:
            err = exc.to_wire() if isinstance(exc, TenureError) else \
                {"code": "INTERNAL", "msg": str(exc)}
            _save(w.layout, {**rec, "error": err})
            raise MaintenanceIncomplete(
                f"the maintenance window stopped after step {done}: {err['msg']}; fix "
                "that, then: tenure owner upgrade --continue",
                {"step": str(done), "failed": str(nxt), "error": err}) from None
        rec = {**rec, "step": str(nxt), "error": None}
        _save(w.layout, rec)
        w.say(f"{nxt}")
    return rec


# -- the steps -------------------------------------------------------------------------------

def _stage(w: Window, rec: dict[str, Any]) -> None:
    """Copy the release for the owner unless it may run the guardian's copy (owner.release
    .tree: the same uid owns it)."""
    p = rec["plan"]
    if p["release"] is None or p["release"] == p["from"]:
        return
    from owner.release import tree
    try:
        tree(w.layout, p["release"], uid=p["owner_uid"])
        return
    except NotFound:
        pass
    from guardian.paths import GuardianPaths
    from guardian.trust import install_trusted
    from protocol.sockets import ensure_private_dir
    ensure_private_dir(w.layout.owner_releases, root=w.layout.execution)
    src = w.layout.releases / p["release"]
    if not src.is_dir():
        raise NotFound(f"release {p['release']} is not installed; `tenure release install` "
                       "it first", {"release": p["release"]})
    install_trusted(GuardianPaths(w.layout.home), src, into=w.layout.owner_releases)


def _drain(w: Window, rec: dict[str, Any]) -> None:
    for level in rec["plan"]["stop"]:
        for key in level:
            w.say(f"stopping {key}")
            r = w.call("stop", {"target": key, "timeout": w.timeout})
            if not r.get("settled"):
                raise MaintenanceIncomplete(f"{key} did not stop within {w.timeout:.0f} s",
                                            {"instance": key, "state": r.get("instances")})


def _stop_owner(w: Window, rec: dict[str, Any]) -> None:
    p = rec["plan"]
    owner = p["owner"]
    if running(owner["pid"], owner["start_ticks"]):
        w.say(f"stopping the owner (pid {owner['pid']})")
        if p["mode"] == "standalone":
            os.kill(owner["pid"], signal.SIGTERM)
        else:
            _systemctl(p["mode"], "stop")
        w.wait("the owner's exit", lambda: not running(owner["pid"], owner["start_ticks"]))
    from .down import shutdown_receipt
    state = shutdown_receipt(w.layout, owner["instance"])["state"]
    if state != "clean":
        raise ReconcileRequired(f"the owner's shutdown receipt is {state!r}, not clean; "
                                "`tenure owner reconcile` proves what is left",
                                {"receipt": state})
    if p["release"] != p["from"]:
        from owner.release import OwnerRelease, save
        save(w.layout.owner_release, OwnerRelease(p["release"], p["from"]))


def _start_owner(w: Window, rec: dict[str, Any]) -> None:
    p = rec["plan"]
    if w.owner_status() is None:
        w.say("starting the owner")
        if p["mode"] == "standalone":
            from .daemons import ensure_daemon
            ensure_daemon(w.layout, "owner", w.layout.owner_sock, foreground=False)
        else:
            _systemctl(p["mode"], "start")
    st = w.wait("a new owner answering", lambda: (lambda s: s if s is not None and
                s["owner"]["instance"] != p["owner"]["instance"] else None)(w.owner_status()))
    rec["progress"]["owner"] = st["owner"]
    rec["progress"]["owner_release"] = st.get("release")


def _restore(w: Window, rec: dict[str, Any]) -> None:
    new = rec["progress"]["owner"]["instance"]
    w.wait("the backend on the new owner", lambda: (w.call("status").get("owner") or {}
                                                    ).get("instance") == new)
    for level in rec["plan"]["start"]:
        for key in level:
            w.say(f"starting {key}")
            r = w.call("start", {"target": key, "timeout": w.timeout})
            if not r.get("settled"):
                raise MaintenanceIncomplete(f"{key} did not come up within "
                                            f"{w.timeout:.0f} s", {"instance": key,
                                                                   "state": r.get("instances")})


def _verify(w: Window, rec: dict[str, Any]) -> None:
    p = rec["plan"]
    st, order = w.call("status"), w.call("order")
    apps = {a["key"]: a for a in st["apps"]}
    down = [k for level in p["start"] for k in level
            if apps.get(k, {}).get("state") not in ("ready", "running")]
    problems = [f"not up: {', '.join(down)}"] if down else []
    if order["stopped_stacks"] != p["stopped_stacks"]:
        problems.append(f"stopped stacks are {order['stopped_stacks']}, were "
                        f"{p['stopped_stacks']}")
    runs = (rec["progress"].get("owner_release") or {})
    if runs.get("running") != p["release"]:
        why = (runs.get("error") or {}).get("msg", "see the owner's log")
        problems.append(f"the owner runs {runs.get('running') or 'the installed code'}, "
                        f"not {p['release']}: {why}")
    if problems:
        raise MaintenanceIncomplete("; ".join(problems), {"problems": problems})
    rec["progress"]["pids"] = {k: apps[k].get("pid") for level in p["start"] for k in level}


def _systemctl(mode: str, verb: str) -> None:
    argv = ["systemctl", *(["--user"] if mode == "systemd-user" else []), verb, UNIT]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise ServiceError(f"{' '.join(argv)} exited {proc.returncode}: "
                           f"{proc.stderr.strip()[-500:]}", {"argv": argv})


STEPS: dict[Step, tuple[Step, Callable[[Window, dict[str, Any]], None]]] = {
    Step.PLANNED: (Step.STAGED, _stage),
    Step.STAGED: (Step.DRAINED, _drain),
    Step.DRAINED: (Step.STOPPED, _stop_owner),
    Step.STOPPED: (Step.STARTED, _start_owner),
    Step.STARTED: (Step.RESTORED, _restore),
    Step.RESTORED: (Step.DONE, _verify),
}
assert set(STEPS) == set(Step) - {Step.DONE}


# -- the command -----------------------------------------------------------------------------

def command(args: Any, w: Window, guardian: Callable[..., Any],
            out: Callable[..., None]) -> int:
    """``tenure owner upgrade``: print the plan, or perform or continue a window."""
    from .exits import Exit
    modes = sum(bool(x) for x in (args.dry_run, args.digest, args.cont))
    if modes != 1:
        raise BadRequest("tenure owner upgrade [RELEASE|PATH] takes exactly one of "
                         "--dry-run, --digest D (the plan you reviewed) or --continue")
    release = None
    if args.release and not args.cont:
        from .releases import resolve_release
        with guardian(args) as g:
            release = resolve_release(g, args.release, install=True)
    if args.dry_run:
        p = plan(w, release)
        out(args, p, plan_text(p, args.release))
        return Exit.OK
    with held(w.layout):
        if args.cont:
            rec = load(w.layout)
            if rec is None or rec["step"] == Step.DONE:
                raise NotFound("no maintenance window is unfinished")
        else:
            rec = begin(w, plan(w, release), args.digest)
        rec = carry_on(w, rec)
    out(args, rec, done_text(rec))
    return Exit.OK


@contextmanager
def held(layout: Layout) -> Iterator[None]:
    """One window at a time on a home: execution/maintenance.lock, held while it runs.
    Raises OperationInProgress when another `tenure owner upgrade` holds it."""
    fd = os.open(str(layout.execution / "maintenance.lock"),
                 os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OperationInProgress("another `tenure owner upgrade` runs on this home; "
                                      "wait for it (or for it to stop)") from None
        yield
    finally:
        os.close(fd)


def done_text(rec: dict[str, Any]) -> str:
    p, prog = rec["plan"], rec["progress"]
    runs = (prog.get("owner_release") or {}).get("running")
    return (f"owner maintenance window done: owner {prog['owner']['instance']} (pid "
            f"{prog['owner']['pid']}) runs "
            f"{'release ' + runs if runs else 'the installed code'}; "
            f"{p['instances']} instances stopped and started again"
            + (f"; still stopped: {', '.join(p['stopped_stacks'])}"
               if p["stopped_stacks"] else ""))
