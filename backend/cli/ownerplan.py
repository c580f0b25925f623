"""The plan of an owner maintenance window (``tenure owner upgrade --dry-run``) and the
checks it shares with the window: which instances it stops and in what order, the
digest the operator approves, how the owner runs (systemd, a user manager, standalone)
and whether the release the new owner would run verifies. Changes nothing."""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

from protocol.errors import (
    BadSignature,
    CapabilityMissing,
    NotFound,
    StateCorrupt,
    UnsafePath,
)
from protocol.layout import Layout

if TYPE_CHECKING:
    from guardian.release import Release

    from .ownerwindow import Window

__all__ = ["UNIT", "WANTED_UP", "check_contracts_offered", "check_release", "mode_of",
           "offered_contracts", "owner_tree", "plan"]

UNIT = "tenure-owner.service"

# the public states of instances the operator wants running (a window stops and starts
# them again); stopped and failed ones are left as they are
WANTED_UP = frozenset({"starting", "running", "ready", "backoff"})


def plan(w: Window, release: str | None) -> dict[str, Any]:
    """What the window would do now (changes nothing). ``release`` None: restart the owner
    on the code it runs. Raises ConnectFailed/BackendUnavailable, NotFound."""
    owner = w.owner_status()
    if owner is None:
        from .holders import silent_holder, silent_listener
        sock, then = w.layout.owner_sock, "A window needs an owner that answers"
        silent = silent_listener(sock, "owner", then) or silent_holder(sock, "owner", then)
        if silent is not None:   # it runs, stopped or hung: `tenure up` would refuse
            raise silent
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
            "backend": (st.get("backend") or {}).get("release"),
            "owner_uid": owner.get("uid", os.geteuid()),
            "stop": stop, "start": stop[::-1], "instances": sum(map(len, stop)),
            "stopped_stacks": order["stopped_stacks"]}
    return {**body, "digest": _digest(body)}


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def sound(p: Any) -> bool:
    """Whether ``p`` is a plan as :func:`plan` made it: its digest is its body's, and
    what a window reads of it is of its type (maintenance.json, read back)."""
    def levels(v: Any) -> bool:
        return type(v) is list and all(type(level) is list and
                                       all(type(k) is str for k in level) for level in v)
    if type(p) is not dict or type(p.get("owner")) is not dict:
        return False
    body = {k: v for k, v in p.items() if k != "digest"}
    return (p.get("digest") == _digest(body) and levels(p.get("stop"))
            and levels(p.get("start")) and type(p.get("instances")) is int
            and type(p.get("mode")) is str and type(p["owner"].get("instance")) is str)


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


def check_release(layout: Layout, rid: str, uid: int) -> Release:
    """Verify release ``rid`` (every file against its RUNTIME.json) where the owner,
    running as ``uid``, will run it from: its own staged copy, or the guardian's copy
    when that may serve it, else the guardian's copy a window would stage; returns that
    copy, verified. Raises NotFound (not installed), StateCorrupt (InterpreterChanged),
    UnsafePath or BadSignature, the message saying that the release does not verify."""
    from guardian.paths import GuardianPaths
    from guardian.trust import verified_release
    from owner.release import verified
    paths = GuardianPaths(layout.home)
    try:
        if owner_tree(layout, rid, uid):
            # the guardian's trust holds for the owner's copy too: trusted release keys
            # and interpreter bindings, as the new owner will verify it
            return verified(layout, rid, uid=uid)
        if (layout.releases / rid).is_dir():
            return verified_release(paths, rid)
        raise NotFound(f"release {rid} is not installed; `tenure release install` it "
                       "first", {"release": rid})
    except (StateCorrupt, UnsafePath, BadSignature) as exc:
        raise type(exc)(f"release {rid} does not verify: {exc.msg}",
                        {**exc.data, "release": rid}) from None
    except OSError as exc:
        raise StateCorrupt(f"release {rid} does not verify: {exc}",
                           {"release": rid}) from None


def owner_tree(layout: Layout, rid: str, uid: int) -> bool:
    """Whether the owner has a tree for ``rid`` (owner.release.tree: its staged copy, or
    the guardian's when the same uid owns it)."""
    from owner.release import tree
    try:
        tree(layout, rid, uid=uid)
    except NotFound:
        return False
    return True


def check_contracts_offered(layout: Layout, p: dict[str, Any], candidate: Release) -> None:
    """Refuse the plan ``p`` when the owner of its release (``candidate``, verified)
    would not offer, at exactly the version, a contract that the release the backend
    runs (``p['backend']``) requires: the backend would never attach to that owner and
    every planned instance would stay down. The installed code's requirements stand in
    for a backend on the installed code. A restart on the code the owner runs offers
    what the backend uses already: nothing to check. Changes nothing. Raises
    CapabilityMissing (``data.missing``: name -> version), StateCorrupt, and what
    verifying the backend's release raises."""
    if p["release"] is None or p["release"] == p["from"]:
        return
    offered = offered_contracts(candidate)
    backend = p.get("backend")
    who = f"the backend's release {backend[:12]}" if backend else "the installed backend"
    try:
        if backend:
            from guardian.paths import GuardianPaths
            from guardian.selection import check_contracts
            from guardian.trust import verified_release
            check_contracts(verified_release(GuardianPaths(layout.home), backend),
                            offered, who=who)
        else:
            from protocol.handover import OWNER_CONTRACTS
            missing = {k: v for k, v in OWNER_CONTRACTS.items() if offered.get(k) != v}
            if missing:
                names = ", ".join(f"{k}@{v}" for k, v in sorted(missing.items()))
                raise CapabilityMissing(f"the owner lacks {names} that {who} requires",
                                        {"missing": missing})
    except CapabilityMissing as exc:
        raise CapabilityMissing(
            f"the owner of release {candidate.id[:12]} cannot serve the backend: "
            f"{exc.msg}, so the backend would not attach to it and the apps would stay "
            "down; nothing was stopped. Plan a release whose owner offers it (or move "
            "the backend to a release that needs what it offers first)",
            {**exc.data, "release": candidate.id, "backend": backend}) from None


def offered_contracts(release: Release) -> dict[str, int]:
    """The contracts the owner of ``release`` (verified) offers: its ``CAPABILITIES``,
    read by its own interpreter from its own ``lib/`` as the owner will import them
    (without the environment, site-packages or bytecode writes). Raises
    CapabilityMissing when they cannot be read: an owner that cannot even import its
    service would not serve a backend either."""
    import subprocess
    boot = (f"import sys; sys.path.insert(0, {str(release.lib)!r}); import json; "
            "from owner.service import CAPABILITIES; json.dump(CAPABILITIES, sys.stdout)")
    argv = [release.interpreter.path, "-I", "-S", "-B", "-c", boot]
    why = ""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        if proc.returncode == 0:
            got = json.loads(proc.stdout)
            if type(got) is dict and all(isinstance(k, str) and type(v) is int
                                         for k, v in got.items()):
                return got
            why = "they are not a map of names to versions"
        else:
            why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        why = str(exc)
    raise CapabilityMissing(f"which contracts the owner of release {release.id[:12]} "
                            f"offers cannot be read: {why}", {"release": release.id})
