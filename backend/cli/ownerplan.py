"""The plan of an owner maintenance window (``tenure owner upgrade --dry-run``) and the
checks it shares with the window: which instances it stops and in what order, the
digest the operator approves, how the owner runs (systemd, a user manager, standalone)
and whether the release the new owner would run verifies. Changes nothing."""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

from protocol.errors import BadSignature, NotFound, StateCorrupt, UnsafePath
from protocol.layout import Layout

if TYPE_CHECKING:
    from .ownerwindow import Window

__all__ = ["UNIT", "WANTED_UP", "check_release", "mode_of", "owner_tree", "plan"]

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


def check_release(layout: Layout, rid: str, uid: int) -> None:
    """Verify release ``rid`` (every file against its RUNTIME.json) where the owner,
    running as ``uid``, will run it from: its own staged copy, or the guardian's copy
    when that may serve it, else the guardian's copy a window would stage. Raises
    NotFound (not installed), StateCorrupt (InterpreterChanged), UnsafePath or
    BadSignature, the message saying that the release does not verify."""
    from guardian.paths import GuardianPaths
    from guardian.trust import verified_release
    from owner.release import verified
    paths = GuardianPaths(layout.home)
    try:
        if owner_tree(layout, rid, uid):
            # the guardian's trust holds for the owner's copy too: trusted release keys
            # and interpreter bindings, as the new owner will verify it
            verified(layout, rid, uid=uid)
        elif (layout.releases / rid).is_dir():
            verified_release(paths, rid)
        else:
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
