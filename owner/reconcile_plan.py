"""A guided reconcile after an owner crash: seal the evidence, drain exactly it, verify.

``prepare`` finds every live process of the dead owner's launches — the leader (pid and
start ticks), members of its process group, processes carrying its launch key in their
environment, and, where its processes sit in a cgroup of their own (a delegated owner),
every member of that cgroup — and seals them with the leftover socket files into
``execution/reconcile-evidence.json`` with a digest. ``drain(digest)`` stops exactly the
sealed processes (each verified by its start ticks, so a reused pid is never hit): TERM,
a grace period, then KILL (``cgroup.kill`` for a launch's cgroup). It refuses with
``CONFLICT`` when the digest is not the sealed one, or when a process of these launches
appeared that the evidence does not name (review again). Then the ordinary reconcile
proves every launch gone and writes the one-use acknowledgement.

Nothing here runs while an owner runs: the caller holds the owner lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from protocol.durable import atomic_write_json, read_json
from protocol.errors import Conflict, NotFound
from protocol.identity import boot_id
from protocol.procfs import environ_matches, group_members, running, start_ticks

from .cgroups import cgroup_name
from .descendants import LAUNCH_KEY_ENV, kill_verified
from .paths import OwnerPaths
from .receipt import read_receipt
from .store import LaunchRow, OwnerStore

__all__ = ["EVIDENCE_KIND", "drain", "evidence_path", "prepare"]

EVIDENCE_KIND = "tenure-owner-reconcile-evidence"
GRACE = 10.0


def evidence_path(paths: OwnerPaths) -> Path:
    return paths.dir / "reconcile-evidence.json"


def prepare(paths: OwnerPaths) -> dict[str, Any]:
    """Seal the evidence as of now and return it (with ``digest``)."""
    store = OwnerStore(paths.db)
    try:
        rows = store.live_launches()
    finally:
        store.close()
    rec = read_receipt(paths.receipt)
    body: dict[str, Any] = {
        "boot_id": boot_id(),
        "previous": None if rec is None else {k: rec.get(k) for k in ("instance", "pid",
                                                                     "state")},
        "launches": [_launch(r, found) for r, found in _found(rows).values()],
        "sockets": sorted(p for p in (paths.sock, paths.notify_sock) if os.path.lexists(p)),
    }
    body["digest"] = _digest(body)
    atomic_write_json(evidence_path(paths), {"kind": EVIDENCE_KIND, "format": 1,
                                             "sealed_at": time.time(), **body})
    return body


def _found(rows: list[LaunchRow]) -> dict[str, tuple[LaunchRow, dict[int, str]]]:
    """Per launch key: the launch and every live pid of it, with why it counts."""
    carriers = environ_matches({f"{LAUNCH_KEY_ENV}={r.launch_key}".encode() for r in rows})
    out: dict[str, tuple[LaunchRow, dict[int, str]]] = {}
    for r in rows:
        found: dict[int, str] = {}
        if r.pid is not None and r.start_ticks is not None and running(r.pid, r.start_ticks):
            found[r.pid] = "leader"
        if r.pgid is not None:
            for pid in group_members(r.pgid):
                found.setdefault(pid, "process group")
        for pid in carriers.get(f"{LAUNCH_KEY_ENV}={r.launch_key}".encode(), []):
            found.setdefault(pid, "launch key in environment")
        cg = _cgroup_of(r.launch_key, list(found))
        if cg is not None:
            for pid in _cgroup_members(cg):
                found.setdefault(pid, "cgroup member")
        out[r.launch_key] = (r, found)
    return out


def _launch(r: LaunchRow, found: dict[int, str]) -> dict[str, Any]:
    procs = [{"pid": pid, "start_ticks": start_ticks(pid), "why": why}
             for pid, why in sorted(found.items())]
    return {"launch_key": r.launch_key, "app": f"{r.stack}/{r.app}/{r.instance}",
            "pid": r.pid, "pgid": r.pgid, "stop": (r.spec or {}).get("stop"),
            "cgroup": _cgroup_of(r.launch_key, list(found)),
            "processes": [p for p in procs if p["start_ticks"] is not None]}


def _cgroup_of(launch_key: str, pids: list[int]) -> str | None:
    """The launch's own cgroup (unified hierarchy), found through one of its processes."""
    name = cgroup_name(launch_key)
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("0::") and line.rstrip().endswith("/" + name):
                for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                    path = Path(mount + line[3:].strip())
                    if (path / "cgroup.procs").exists():
                        return str(path)
    return None


def _cgroup_members(path: str) -> list[int]:
    try:
        return [int(x) for x in Path(path, "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _digest(body: dict[str, Any]) -> str:
    data = json.dumps({k: v for k, v in body.items() if k != "digest"}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


def drain(paths: OwnerPaths, digest: str, grace: float = GRACE,
          sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Stop exactly the sealed processes. Returns ``{stopped, gone_already, killed}``.
    Raises NotFound (nothing sealed), Conflict (another digest, or new processes)."""
    try:
        sealed = read_json(evidence_path(paths), EVIDENCE_KIND)
    except FileNotFoundError:
        raise NotFound("no sealed evidence: run `tenure owner reconcile --prepare`") from None
    if sealed.get("digest") != digest or _digest(_body(sealed)) != digest:
        raise Conflict("the digest is not the sealed evidence's; review the plan again",
                       {"sealed": sealed.get("digest"), "given": digest})
    named = {(p["pid"], p["start_ticks"]) for ln in sealed["launches"]
             for p in ln["processes"]}
    _refuse_new(paths, named)
    targets = [(p["pid"], p["start_ticks"]) for p in _processes(sealed)]
    alive = [t for t in targets if running(*t)]
    for pid, ticks in alive:
        kill_verified(pid, ticks, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(running(p, t) for p, t in alive):
        sleep(0.05)
    killed = [(p, t) for p, t in alive if kill_verified(p, t, signal.SIGKILL)]
    for ln in sealed["launches"]:
        if ln.get("cgroup") and os.path.exists(os.path.join(ln["cgroup"], "cgroup.kill")):
            Path(ln["cgroup"], "cgroup.kill").write_text("1")
    return {"stopped": len(alive), "gone_already": len(targets) - len(alive),
            "killed": [p for p, _ in killed]}


def _body(sealed: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sealed.items() if k not in ("kind", "format", "sealed_at")}


def _processes(sealed: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for ln in sealed["launches"] for p in ln["processes"]]


def _refuse_new(paths: OwnerPaths, named: set[tuple[int, int | None]]) -> None:
    store = OwnerStore(paths.db)
    try:
        rows = store.live_launches()
    finally:
        store.close()
    now = {(pid, start_ticks(pid)) for _r, found in _found(rows).values() for pid in found}
    new = sorted(pid for pid, ticks in now if ticks is not None and (pid, ticks) not in named)
    if new:
        raise Conflict(f"{len(new)} processes of these launches are not in the sealed "
                       "evidence; run `tenure owner reconcile --prepare` again",
                       {"new_pids": new[:50]})
