"""A guided reconcile after an owner crash: seal the evidence, drain exactly it, verify.

``prepare`` finds every live process of the dead owner's launches (:mod:`owner.evidence`:
leader, process group, launch key in the environment, recorded descendants — of exited
launches too — and cgroup members), and every process that carries this home in its
environment while no recorded launch accounts for it (owner.db set aside as damaged, or
emptied: ``unrecorded``, grouped by the launch key it carries), and seals them with the
leftover socket files (path, inode and ctime) into ``execution/reconcile-evidence.json``
with a digest.
``drain(digest)`` stops exactly the sealed processes (each verified by its start ticks,
so a reused pid is never hit): TERM, a grace period, then KILL (and ``cgroup.kill`` for
a launch's cgroup). It refuses with ``CONFLICT`` when the digest is not the sealed one,
when a process of these launches appeared that the evidence does not name, or when the
leftover sockets changed (another owner ran meanwhile: the evidence describes a past
that is gone). Then the ordinary reconcile proves every launch gone and writes the
one-use acknowledgement.

One kind of new process is no change: a member of the process group of a sealed
launch whose sealed leader still runs as sealed (same pid and start ticks), claimed by
no other launch. An app that forks short-lived children (``while :; do sleep 1; done``)
always has such a child the seal did not name; refusing it made the drain impossible.
It is provably the launch's: the leader made the group (and its session) at launch,
only a process of that session can join the group, and while the leader runs nobody
else can own that group id. An unrecorded launch's leader is the oldest of its
processes that leads its own session, as the owner starts every app: every process of
that session descends from a process that carries the launch key. Such a group is
signalled as a whole (``killpg``) while its leader is verified alive, so a child forked
during the stop gets the signal too, and the drain waits until the group is empty
before the reconcile looks.

Nothing here runs while an owner runs: the caller holds the owner lock.
"""

from __future__ import annotations

import contextlib
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
from protocol.errors import Conflict, NotFound, StateCorrupt
from protocol.identity import boot_id
from protocol.procfs import environ, group_members, kill_verified, read_stat, running, start_ticks
from protocol.schema import is_count

from .evidence import (
    HOME_IN_ENVIRONMENT,
    Found,
    cgroup_of,
    environ_scan,
    find,
    printable,
    recorded,
    recorded_cgroup,
    unrecorded,
)
from .paths import OwnerPaths
from .receipt import read_receipt
from .reconcile import refuse_inside_app

__all__ = ["EVIDENCE_KIND", "drain", "evidence_path", "prepare"]

EVIDENCE_KIND = "tenure-owner-reconcile-evidence"
GRACE = 10.0
KILL_WAIT = 5.0  # a SIGKILLed process is gone within milliseconds; bounded anyway


def evidence_path(paths: OwnerPaths) -> Path:
    return paths.dir / "reconcile-evidence.json"


def prepare(paths: OwnerPaths) -> dict[str, Any]:
    """Seal the evidence as of now and return it (with ``digest``). Raises BadRequest
    when run inside one of this home's apps (:func:`owner.reconcile.refuse_inside_app`)."""
    refuse_inside_app(paths)
    found, extra = _find(paths)
    rec = read_receipt(paths.receipt)
    sockets = _sockets(paths)
    body: dict[str, Any] = {
        "boot_id": boot_id(),
        "previous": None if rec is None else {k: rec.get(k) for k in ("instance", "pid",
                                                                     "state")},
        "launches": [*(_launch(f) for f in found.values()),
                     *(_unrecorded(key, pids) for key, pids in extra.items())],
        "sockets": sorted(sockets),
        "socket_ids": sockets,
    }
    body["digest"] = _digest(body)
    atomic_write_json(evidence_path(paths), {"kind": EVIDENCE_KIND, "format": 1,
                                             "sealed_at": time.time(), **body})
    return body


def _find(paths: OwnerPaths) -> tuple[dict[str, Found], dict[str, list[int]]]:
    """The recorded launches' processes, and the unrecorded ones by the launch key they
    carry (``?`` when none), from one scan of the environments."""
    suspects = recorded(paths.db, boot_id(), paths.home_marker).suspects
    scan = environ_scan(suspects)
    found = find(suspects, scan)
    return found, unrecorded(suspects, found, scan)


def _launch(f: Found) -> dict[str, Any]:
    r = f.row
    return {"launch_key": r.launch_key, "app": f"{r.stack}/{r.app}/{r.instance}",
            "state": str(r.state), "pid": r.pid, "pgid": r.pgid,
            "stop": (r.spec or {}).get("stop"), "cgroup": f.cgroup,
            "processes": _processes_of(f.pids)}


def _unrecorded(key: str, pids: list[int]) -> dict[str, Any]:
    """A launch owner.db does not record, as its processes show it: its leader (see the
    module) when one leads its own session, its own cgroup when one holds them."""
    procs = _processes_of(dict.fromkeys(pids, HOME_IN_ENVIRONMENT))
    lead = None if key == "?" else _session_leader(procs)
    if lead is not None:
        lead["why"] = "leader"
    pid = None if lead is None else lead["pid"]
    return {"launch_key": key, "app": _app_named(pid if pid is not None else pids[0]),
            "state": "unrecorded", "pid": pid, "pgid": pid,
            "stop": None, "cgroup": None if key == "?" else cgroup_of(key, pids),
            "processes": procs}


def _app_named(pid: int) -> str:
    """``stack/app/instance`` as the backend named them in ``pid``'s environment, for the
    operator's review (``?`` when it does not say)."""
    env = dict(v.split(b"=", 1) for v in environ(pid) or () if b"=" in v)
    parts = [env.get(name) for name in (b"TENURE_STACK", b"TENURE_APP", b"TENURE_INSTANCE")]
    return printable("/".join(p.decode(errors="replace") for p in parts if p is not None)) \
        if all(parts) else "?"


def _processes_of(pids: dict[int, str]) -> list[dict[str, Any]]:
    """pid -> why, as sealed: with its start ticks, those that still run."""
    procs = [{"pid": pid, "start_ticks": start_ticks(pid), "why": why}
             for pid, why in sorted(pids.items())]
    return [p for p in procs if p["start_ticks"] is not None]


def _session_leader(procs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The oldest of ``procs`` that leads its own session (and so its group, for life:
    a session leader can change neither)."""
    leaders = [p for p in procs if (st := read_stat(p["pid"])) is not None
               and st.start_ticks == p["start_ticks"] and st.sid == st.pgid == p["pid"]]
    return min(leaders, key=lambda p: (p["start_ticks"], p["pid"]), default=None)


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
    """Stop exactly the sealed processes, and the children their still running leaders
    forked since the seal (see the module). Returns ``{stopped, gone_already, joined,
    killed, cgroup_kill_failed, unrecorded}``: ``joined``, the pids that joined a sealed
    group since the seal; ``cgroup_kill_failed``, cgroups whose ``cgroup.kill`` the
    kernel refused, with the error (the reconcile that follows proves whether anything
    is left); ``unrecorded``, the sealed launches owner.db does not name (the
    reconcile's count of launches proven gone is of owner.db's).
    Raises NotFound (nothing sealed), Conflict (another digest, new processes that are
    not a sealed leader's, changed sockets), StateCorrupt (evidence of another shape)."""
    refuse_inside_app(paths)
    sealed = _read_sealed(paths, digest)
    joined = _refuse_changed(paths, sealed)
    targets = [(p["pid"], p["start_ticks"]) for p in _processes(sealed)]
    alive = [t for t in targets if running(*t)]
    stopping = alive + [t for t in joined.items() if running(*t)]
    groups = _signal_groups(sealed, signal.SIGTERM)
    _signal_each(stopping, groups, signal.SIGTERM)
    _wait_gone(stopping, groups, grace, sleep)
    stubborn = [t for t in stopping if running(*t)]
    failed = _kill_cgroups(sealed)
    groups = _signal_groups(sealed, signal.SIGKILL)
    _signal_each(stubborn, groups, signal.SIGKILL)
    _wait_gone(stubborn, groups, KILL_WAIT, sleep)
    return {"stopped": len(alive), "gone_already": len(targets) - len(alive),
            "joined": sorted(joined), "killed": [p for p, _ in stubborn],
            "cgroup_kill_failed": failed,
            "unrecorded": sum(ln.get("state") == "unrecorded" for ln in sealed["launches"])}


def _leader_groups(sealed: dict[str, Any]) -> dict[int, str]:
    """Process group id -> launch key, of the sealed launches whose group is provably
    theirs right now: the leader made it at launch (pid = pgid) and still runs as sealed
    (same start ticks), so no other process can own that id. Read it after what it
    vouches for: a leader that runs now ran all the time since the seal."""
    out = {}
    for ln in sealed["launches"]:
        pgid = ln.get("pgid")
        lead = next((p for p in ln["processes"] if p["why"] == "leader"
                     and p["pid"] == pgid == ln.get("pid")), None)
        if lead is not None and running(lead["pid"], lead["start_ticks"]):
            out[lead["pid"]] = ln["launch_key"]
    return out


def _signal_groups(sealed: dict[str, Any], sig: int) -> set[int]:
    """Send ``sig`` to the process group of every sealed launch whose leader still runs
    as sealed, checked just before: one signal takes every member, forks in flight
    included. Returns the groups signalled. A group that vanished meanwhile is no
    error."""
    done = set()
    for pgid in _leader_groups(sealed):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        done.add(pgid)
    return done


def _signal_each(procs: list[tuple[int, int]], groups: set[int], sig: int) -> None:
    """Send ``sig`` to each of ``procs`` still running as recorded, except members of
    ``groups`` (signalled as a whole already: a second SIGTERM may mean "hurry" to an
    app)."""
    for pid, ticks in procs:
        st = read_stat(pid)
        kill_verified(pid, ticks, sig,
                      skip_pgid=st.pgid if st is not None and st.pgid in groups else None)


def _read_sealed(paths: OwnerPaths, digest: str) -> dict[str, Any]:
    try:
        sealed = read_json(evidence_path(paths), EVIDENCE_KIND)
    except FileNotFoundError:
        raise NotFound("no sealed evidence: run `tenure owner reconcile --prepare`") from None
    if sealed.get("digest") != digest or _digest(_body(sealed)) != digest:
        raise Conflict("the digest is not the sealed evidence's; review the plan again",
                       {"sealed": sealed.get("digest"), "given": digest})
    if not _sound(sealed):   # the digest proves the file whole, not written by --prepare
        raise StateCorrupt(f"{evidence_path(paths)} is not evidence this owner sealed: "
                           "run `tenure owner reconcile --prepare` again",
                           {"path": str(evidence_path(paths))})
    return sealed


def _sound(sealed: dict[str, Any]) -> bool:
    """Whether sealed evidence has the shape :func:`prepare` writes, every value of the
    type the drain acts on (pids it signals, cgroups it kills, sockets it compares)."""
    launches, sockets, ids = sealed.get("launches"), sealed.get("sockets"), \
        sealed.get("socket_ids")
    return (isinstance(launches, list) and all(map(_sound_launch, launches))
            and isinstance(sockets, list) and all(isinstance(s, str) for s in sockets)
            and (ids is None or (isinstance(ids, dict) and all(map(_socket_id,
                                                                   ids.values())))))


def _socket_id(v: Any) -> bool:
    """[inode, ctime in ns] as :func:`_sockets` records it (None: an older seal's)."""
    return v is None or (isinstance(v, list) and len(v) == 2 and all(map(is_count, v)))


def _sound_launch(ln: Any) -> bool:
    return (isinstance(ln, dict) and isinstance(ln.get("launch_key"), str)
            and all(ln.get(k) is None or is_count(ln[k]) for k in ("pid", "pgid"))
            and (ln.get("cgroup") is None or isinstance(ln["cgroup"], str))
            and isinstance(ln.get("processes"), list) and all(
                isinstance(p, dict) and is_count(p.get("pid"), 1)
                and is_count(p.get("start_ticks")) and isinstance(p.get("why"), str)
                for p in ln["processes"]))


def _wait_gone(procs: list[tuple[int, int]], groups: set[int], timeout: float,
               sleep: Callable[[float], None]) -> None:
    """Until ``procs`` have exited and ``groups`` are empty (zombies hold nothing), or
    ``timeout``: the reconcile that follows must not find a child that got the signal and
    is still on its way out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (any(running(p, t) for p, t in procs) or
                                           any(group_members(g) for g in groups)):
        sleep(0.05)


def _kill_cgroups(sealed: dict[str, Any]) -> list[dict[str, Any]]:
    """Write ``cgroup.kill`` of every sealed cgroup that still exists (forks in flight
    die with it). A refusal is returned, never raised: the processes were signalled one
    by one as well, and the reconcile after the drain proves the cgroup empty or
    refuses with PROCESSES_ALIVE."""
    failed = []
    for ln in sealed["launches"]:
        # the launch's own cgroup only (named after it, under a cgroup mount), whatever
        # the file says: a cgroup that is gone already counts for nothing as well
        path = recorded_cgroup(ln["launch_key"], ln.get("cgroup"))
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


def _refuse_changed(paths: OwnerPaths, sealed: dict[str, Any]) -> dict[int, int]:
    """Raise Conflict when the world is not the one sealed: a process of these launches
    that the evidence does not name and that did not join a sealed leader's group, or
    leftover sockets that are not the sealed ones. Returns those that joined (pid ->
    start ticks)."""
    joined = _refuse_new(paths, sealed)
    was = sealed.get("socket_ids") or dict.fromkeys(sealed["sockets"])
    is_ = _sockets(paths)
    if set(was) != set(is_) or any(ids not in (None, is_[p]) for p, ids in was.items()):
        raise Conflict("the leftover sockets changed since the evidence was sealed (did "
                       "another owner run?); run `tenure owner reconcile --prepare` again",
                       {"sealed": was, "now": is_})
    return joined


def _refuse_new(paths: OwnerPaths, sealed: dict[str, Any]) -> dict[int, int]:
    """The processes of these launches found now that the evidence does not name: those
    in the group of a sealed leader that still runs as sealed, claimed by that launch
    alone, are returned (pid -> start ticks); any other raises Conflict. The groups are
    read after the processes (see :func:`_leader_groups`)."""
    named = {(p["pid"], p["start_ticks"]) for p in _processes(sealed)}
    claims: dict[int, set[str]] = {}
    found, extra = _find(paths)
    for key, pids in [*((k, list(f.pids)) for k, f in found.items()), *extra.items()]:
        for pid in pids:
            claims.setdefault(pid, set()).add(key)
    new = {pid: st for pid in claims if (st := read_stat(pid)) is not None
           and not st.zombie and (pid, st.start_ticks) not in named}
    groups = _leader_groups(sealed)
    joined = {pid: st.start_ticks for pid, st in new.items()
              if st.pgid in groups and claims[pid] == {groups[st.pgid]}}
    stranger = sorted(set(new) - set(joined))
    if stranger:
        raise Conflict(f"{len(stranger)} processes of these launches are not in the sealed "
                       "evidence (nor in the process group of a sealed leader that still "
                       "runs); run `tenure owner reconcile --prepare` again",
                       {"new_pids": stranger[:50]})
    return joined
