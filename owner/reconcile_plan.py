"""A guided reconcile after an owner crash: seal the evidence, drain exactly it, verify.

``prepare`` finds every live process of the dead owner's launches (:mod:`owner.evidence`:
leader, process group, launch key in the environment, recorded descendants — of exited
launches too — and cgroup members) and seals them with the leftover socket files (path,
inode and ctime) into ``execution/reconcile-evidence.json`` with a digest.
``drain(digest)`` stops exactly the sealed processes (each verified by its start ticks,
so a reused pid is never hit): TERM, a grace period, then KILL (and ``cgroup.kill`` for
a launch's cgroup). It refuses with ``CONFLICT`` when the digest is not the sealed one,
when a process of these launches appeared that the evidence does not name, or when the
leftover sockets changed (another owner ran meanwhile: the evidence describes a past
that is gone). Then the ordinary reconcile proves every launch gone and writes the
one-use acknowledgement.

Nothing here runs while an owner runs: the caller holds the owner lock.
"""

from __future__ import annotations

import errno
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
from protocol.procfs import running, start_ticks

from .descendants import kill_verified
from .evidence import Found, find, suspects
from .paths import OwnerPaths
from .receipt import read_receipt
from .store import OwnerStore

__all__ = ["EVIDENCE_KIND", "drain", "evidence_path", "prepare"]

EVIDENCE_KIND = "tenure-owner-reconcile-evidence"
GRACE = 10.0
KILL_WAIT = 5.0  # a SIGKILLed process is gone within milliseconds; bounded anyway


def evidence_path(paths: OwnerPaths) -> Path:
    return paths.dir / "reconcile-evidence.json"


def prepare(paths: OwnerPaths) -> dict[str, Any]:
    """Seal the evidence as of now and return it (with ``digest``)."""
    found = _find(paths)
    rec = read_receipt(paths.receipt)
    sockets = _sockets(paths)
    body: dict[str, Any] = {
        "boot_id": boot_id(),
        "previous": None if rec is None else {k: rec.get(k) for k in ("instance", "pid",
                                                                     "state")},
        "launches": [_launch(f) for f in found.values()],
        "sockets": sorted(sockets),
        "socket_ids": sockets,
    }
    body["digest"] = _digest(body)
    atomic_write_json(evidence_path(paths), {"kind": EVIDENCE_KIND, "format": 1,
                                             "sealed_at": time.time(), **body})
    return body


def _find(paths: OwnerPaths) -> dict[str, Found]:
    store = OwnerStore(paths.db)
    try:
        return find(suspects(store, boot_id(), paths.home_marker))
    finally:
        store.close()


def _launch(f: Found) -> dict[str, Any]:
    r = f.row
    procs = [{"pid": pid, "start_ticks": start_ticks(pid), "why": why}
             for pid, why in sorted(f.pids.items())]
    return {"launch_key": r.launch_key, "app": f"{r.stack}/{r.app}/{r.instance}",
            "state": str(r.state), "pid": r.pid, "pgid": r.pgid,
            "stop": (r.spec or {}).get("stop"), "cgroup": f.cgroup,
            "processes": [p for p in procs if p["start_ticks"] is not None]}


def _sockets(paths: OwnerPaths) -> dict[str, list[int]]:
    """Leftover socket files of the dead owner: path -> [inode, ctime in ns]. A new owner
    replaces them; an inode number alone may come back at once, the pair does not."""
    out = {}
    for path in (paths.sock, paths.notify_sock):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        out[path] = [st.st_ino, st.st_ctime_ns]
    return out


def _digest(body: dict[str, Any]) -> str:
    data = json.dumps({k: v for k, v in body.items() if k != "digest"}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


def drain(paths: OwnerPaths, digest: str, grace: float = GRACE,
          sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Stop exactly the sealed processes. Returns ``{stopped, gone_already, killed,
    cgroup_kill_failed}`` (the last: cgroups whose ``cgroup.kill`` the kernel refused,
    with the error; the reconcile that follows proves whether anything is left).
    Raises NotFound (nothing sealed), Conflict (another digest, new processes, changed
    sockets)."""
    sealed = _read_sealed(paths, digest)
    _refuse_changed(paths, sealed)
    targets = [(p["pid"], p["start_ticks"]) for p in _processes(sealed)]
    alive = [t for t in targets if running(*t)]
    for pid, ticks in alive:
        kill_verified(pid, ticks, signal.SIGTERM)
    _wait_gone(alive, grace, sleep)
    stubborn = [t for t in alive if running(*t)]
    failed = _kill_cgroups(sealed)
    for pid, ticks in stubborn:
        kill_verified(pid, ticks, signal.SIGKILL)
    _wait_gone(stubborn, KILL_WAIT, sleep)
    return {"stopped": len(alive), "gone_already": len(targets) - len(alive),
            "killed": [p for p, _ in stubborn], "cgroup_kill_failed": failed}


def _read_sealed(paths: OwnerPaths, digest: str) -> dict[str, Any]:
    try:
        sealed = read_json(evidence_path(paths), EVIDENCE_KIND)
    except FileNotFoundError:
        raise NotFound("no sealed evidence: run `tenure owner reconcile --prepare`") from None
    if sealed.get("digest") != digest or _digest(_body(sealed)) != digest:
        raise Conflict("the digest is not the sealed evidence's; review the plan again",
                       {"sealed": sealed.get("digest"), "given": digest})
    return sealed


def _wait_gone(procs: list[tuple[int, int]], timeout: float,
               sleep: Callable[[float], None]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(running(p, t) for p, t in procs):
        sleep(0.05)


def _kill_cgroups(sealed: dict[str, Any]) -> list[dict[str, Any]]:
    """Write ``cgroup.kill`` of every sealed cgroup that still exists (forks in flight
    die with it). A refusal is returned, never raised: the processes were signalled one
    by one as well, and the reconcile after the drain proves the cgroup empty or
    refuses with PROCESSES_ALIVE."""
    failed = []
    for ln in sealed["launches"]:
        path = ln.get("cgroup")
        if not path:
            continue
        try:
            Path(path, "cgroup.kill").write_text("1")
        except FileNotFoundError:
            continue  # the cgroup is gone, or the kernel has no cgroup.kill (< 5.14)
        except OSError as e:
            failed.append({"launch_key": ln["launch_key"], "cgroup": path,
                           "errno": errno.errorcode.get(e.errno or 0, str(e.errno)),
                           "strerror": e.strerror})
    return failed


def _body(sealed: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sealed.items() if k not in ("kind", "format", "sealed_at")}


def _processes(sealed: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for ln in sealed["launches"] for p in ln["processes"]]


def _refuse_changed(paths: OwnerPaths, sealed: dict[str, Any]) -> None:
    """Raise Conflict when the world is not the one sealed: a process of these launches
    that the evidence does not name, or leftover sockets that are not the sealed ones."""
    named = {(p["pid"], p["start_ticks"]) for p in _processes(sealed)}
    now = {(pid, start_ticks(pid)) for f in _find(paths).values() for pid in f.pids}
    new = sorted(pid for pid, ticks in now if ticks is not None and (pid, ticks) not in named)
    if new:
        raise Conflict(f"{len(new)} processes of these launches are not in the sealed "
                       "evidence; run `tenure owner reconcile --prepare` again",
                       {"new_pids": new[:50]})
    was = sealed.get("socket_ids") or dict.fromkeys(sealed["sockets"])
    is_ = _sockets(paths)
    if set(was) != set(is_) or any(ids not in (None, is_[p]) for p, ids in was.items()):
        raise Conflict("the leftover sockets changed since the evidence was sealed (did "
                       "another owner run?); run `tenure owner reconcile --prepare` again",
                       {"sealed": was, "now": is_})
