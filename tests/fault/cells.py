"""One cell of the qualification matrix: a real owner, guardian and backends in a short
temporary home; one flow (upgrade, rollback, restore, recover); one fault injected at one
await point of the guardian (guardian.faults). Afterwards the world must be valid:

- every activation is final and its receipts follow its kind's table;
- exactly one backend generation runs and holds the owner's epoch and grant, or the last
  activation ended ``uncertain``/``blocked`` with its reason and no generation acts;
- no standby or candidate is left behind;
- every application has the same pid and start time as before (also when the owner
  itself was killed: its applications outlive it);
- the epoch the owner holds was granted, once, by the guardian.

Used by tests/fault/test_fault_matrix.py (a fast subset) and bench/faults.py (all).
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "guardian"))
import itertools

from test_handoff_support import (
    HandGuardian,
    backend_procs,
    config,
    guardian_status,
    install,
    stop_cluster_guardian,
)

from backend.testing import Cluster
from guardian.cold import POINTS as COLD_POINTS
from guardian.faults import ACTIONS
from guardian.handoff import POINTS as HANDOFF_POINTS
from guardian.phases import FINAL, Kind, Phase, allowed
from protocol.client import Client

__all__ = ["ACTIONS", "Cell", "all_cells", "run_cell"]

DEADLINE = "3"   # TENURE_GUARDIAN_DEADLINE in a cell: a hang costs seconds, not minutes
HOT_POINTS = tuple(p for p in HANDOFF_POINTS if not p.startswith("restore."))
RESTORE_POINTS = tuple(p for p in HANDOFF_POINTS if p.startswith("restore."))


@dataclass(frozen=True)
class Cell:
    flow: str      # upgrade | rollback | restore | recover
    point: str
    action: str

    @property
    def name(self) -> str:
        return f"{self.flow}/{self.point}/{self.action}"


def all_cells() -> list[Cell]:
    points = {"upgrade": HOT_POINTS, "rollback": HOT_POINTS, "restore": RESTORE_POINTS,
              "recover": COLD_POINTS}
    return [Cell(flow, p, a) for flow, pts in points.items() for p in pts for a in ACTIONS]


@dataclass
class Releases:
    sealed: Path
    good: Path
    crashes: Path


@dataclass
class Result:
    cell: Cell
    valid: bool
    problems: list[str] = field(default_factory=list)
    endings: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run_cell(cell: Cell, rel: Releases) -> Result:
    """Run one cell in its own home; everything it started is stopped again."""
    t0 = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="tq", dir="/tmp"))
    os.chmod(home, 0o700)
    c = Cluster(home, rel.sealed)
    c.env = {"TENURE_GUARDIAN_DEADLINE": DEADLINE}
    guardians: list[HandGuardian] = []
    result = Result(cell, False)
    try:
        _run(c, cell, rel, guardians, result)
    except Exception as exc:   # a harness failure is an invalid cell, with the reason
        result.problems.append(f"harness: {type(exc).__name__}: {exc}")
    finally:
        _teardown(c, guardians, home)
    result.valid = not result.problems
    result.seconds = round(time.monotonic() - t0, 2)
    return result


def _run(c: Cluster, cell: Cell, rel: Releases, guardians: list[HandGuardian],
         result: Result) -> None:
    c.up(config(sleepers=2))
    c.wait_ready(2)
    target = install(c, rel.crashes if cell.flow == "restore" else rel.good)
    if cell.flow == "rollback":
        c.cli("backend", "upgrade", target, check=True)
    if cell.flow == "recover":
        _wait_certificate(c)
    apps = c.pids()
    stop_cluster_guardian(c, signal.SIGKILL)      # its backend keeps running
    faulty = HandGuardian(c, fault=f"{cell.point}:{cell.action}", tag="faulty")
    guardians.append(faulty)
    faulty.wait_ready()
    killed = _trigger(c, cell, target)
    _settle(c, faulty, guardians, killed)
    _check(c, cell, apps, result)


def _wait_certificate(c: Cluster) -> None:
    def certified() -> bool:
        st = guardian_status(c)
        return bool(st["certificate"]["valid"])
    c.wait(certified, 30, "a valid recovery certificate")


def _trigger(c: Cluster, cell: Cell, target: str) -> int | None:
    """Start the flow; for ``recover`` returns the pid of the backend it killed."""
    if cell.flow == "recover":
        return c.kill_backend()
    method, params = ("rollback", {}) if cell.flow == "rollback" else \
        ("upgrade", {"release": target})
    try:
        with Client(c.layout.guardian_sock, pin=False, timeout=300) as g:
            g.call(method, params)
    except Exception:
        pass  # the guardian may die under the call; the receipts say what happened
    return None


def _settled(st: dict[str, Any], killed: int | None) -> bool:
    if st["handoff_in_progress"] or not all(Phase(a["phase"]) in FINAL for a in st["recent"]):
        return False
    if killed is None:
        return True
    backend = st["backend"]   # a recovery must have run: a new generation, or a block
    return bool(st["blocked"]) or (backend is not None and backend["pid"] != killed)


def _settle(c: Cluster, faulty: HandGuardian, guardians: list[HandGuardian],
            killed: int | None) -> None:
    """Until no activation is open, no command runs (and after a killed backend, a
    recovery ran), twice in a row; a killed guardian is replaced by a healthy one
    (which finishes what it left open)."""
    deadline = time.monotonic() + 240
    calm = 0
    while time.monotonic() < deadline:
        if faulty.proc.poll() is not None:
            healthy = HandGuardian(c, tag=f"healthy-{len(guardians)}")
            guardians.append(healthy)
            healthy.wait_ready()
            faulty, calm = healthy, 0
        try:
            st = guardian_status(c)
        except Exception:
            time.sleep(0.1)
            continue
        calm = calm + 1 if _settled(st, killed) else 0
        if calm >= 3:
            return
        time.sleep(0.25)
    raise AssertionError("the guardian did not settle in 240 s")


def _check(c: Cluster, cell: Cell, apps: dict[str, tuple[int, int]], result: Result) -> None:
    p = result.problems
    st = guardian_status(c)
    db = sqlite3.connect(f"file:{c.layout.home}/runtime/state.db?mode=ro", uri=True)
    try:
        acts = db.execute("SELECT id, kind, phase FROM activations ORDER BY created_at, rowid"
                          ).fetchall()
        grants = dict(db.execute("SELECT epoch, activation FROM grants").fetchall())
        for aid, kind, phase in acts:
            seq = [r[0] for r in db.execute("SELECT phase FROM receipts WHERE activation = ? "
                                            "ORDER BY seq", (aid,))]
            _check_receipts(p, aid, Kind(kind), phase, seq)
    finally:
        db.close()
    last = acts[-1]
    result.endings = [f"{k}:{ph}" for _a, k, ph in acts[1:]]
    owner = _owner_status(c)
    _check_backends(c, p, st, owner, Phase(last[2]))
    if owner is not None:
        held = owner.get("grant") or {}
        if grants.get(owner["epoch"]) != held.get("activation"):
            p.append(f"the owner holds epoch {owner['epoch']} for {held.get('activation')}, "
                     "which the guardian never granted so")
    for key, (pid, ticks) in apps.items():
        if not _alive(pid, ticks):
            p.append(f"application {key} (pid {pid}) is gone or was replaced")


def _check_receipts(p: list[str], aid: str, kind: Kind, phase: str, seq: list[str]) -> None:
    if Phase(phase) not in FINAL:
        p.append(f"activation {aid} ({kind}) left open in {phase}")
    if not seq or seq[0] != "created" or seq[-1] != phase:
        p.append(f"activation {aid} receipts {seq} do not end in {phase}")
    for a, b in itertools.pairwise(seq):
        if not allowed(kind, Phase(a), Phase(b)):
            p.append(f"activation {aid} ({kind}) moved {a} → {b}, not in its table")


def _check_backends(c: Cluster, p: list[str], st: dict[str, Any],
                    owner: dict[str, Any] | None, last: Phase) -> None:
    procs = backend_procs(c.layout.home)
    current = (st["backend"] or {}).get("pid")   # an activated standby keeps its argv
    standbys = [x for x in procs if "--standby" in x.cmdline() and x.pid != current]
    if standbys:
        p.append(f"standby generations left behind: {[x.pid for x in standbys]}")
    acting = [x for x in procs if x not in standbys]
    if last in (Phase.UNCERTAIN, Phase.BLOCKED) or st["blocked"]:
        if owner is not None and acting and _holds_epoch(st, owner):
            p.append(f"{last}: yet a generation holds the owner's epoch")
        if not st["blocked"]:
            p.append(f"{last}: the guardian does not say it is blocked")
        return
    if len(acting) != 1:
        p.append(f"{len(acting)} backend generations run ({[x.pid for x in acting]})")
        return
    if st["backend"] is None or st["backend"]["pid"] != acting[0].pid:
        p.append("the guardian does not watch the generation that runs")
    if owner is not None and not _holds_epoch(st, owner):
        p.append("the running generation does not hold the owner's epoch")


def _holds_epoch(st: dict[str, Any], owner: dict[str, Any]) -> bool:
    """Whether the generation the guardian watches holds the owner's grant (asked of the
    owner, not of the generation: a hung generation cannot answer)."""
    backend = st["backend"] or {}
    held = (owner.get("grant") or {}).get("activation")
    return held is not None and held == backend.get("activation")


def _owner_status(c: Cluster) -> dict[str, Any] | None:
    try:
        with c.owner(timeout=5) as o:
            st: dict[str, Any] = o.call("status")
            return st
    except Exception:
        return None   # killed by the cell


def _alive(pid: int, ticks: int) -> bool:
    from protocol.identity import start_ticks
    return start_ticks(pid) == ticks


def _teardown(c: Cluster, guardians: list[HandGuardian], home: Path) -> None:
    for proc in backend_procs(home):   # a hung (SIGSTOPped) generation must hear SIGTERM
        try:
            proc.send_signal(signal.SIGCONT)
        except psutil.Error:
            pass
    for g in guardians:
        g.stop()
    try:
        c.down()
    except Exception:
        pass
    for pid in c.leftovers():          # ours: they carry this home in argv or environ
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while c.leftovers() and time.monotonic() < deadline:
        time.sleep(0.05)
    for root, dirs, _files in os.walk(home):   # installed releases are read-only
        for d in dirs:
            if not os.path.islink(os.path.join(root, d)):
                os.chmod(os.path.join(root, d), 0o700)
    shutil.rmtree(home, ignore_errors=True)
