"""``python -m owner reconcile``: prove that a dead owner's launches are gone.

A launch is proven gone when no source of :mod:`owner.evidence` finds a process of it:
its recorded process (pid with the same start ticks), its process group, a process
carrying its launch key in its environment, a descendant the owner recorded (even of a
launch whose leader exited), its cgroup. Only then is a one-use acknowledgement written
that lets the next owner start. Nothing is killed here: the operator decides what to
stop (or lets ``--drain`` stop what ``--prepare`` sealed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from protocol.errors import BadRequest, ProcessesAlive
from protocol.identity import boot_id
from protocol.layout import OWNER_HOME_ENV

from .evidence import (
    REASONS,
    Found,
    environ_scan,
    find,
    inside_app,
    recorded,
    unrecorded,
)
from .paths import OwnerPaths
from .receipt import needs_reconcile, read_receipt, write_ack

__all__ = ["Survivor", "reconcile", "reconcile_locked", "refuse_inside_app", "survivors"]

# Why a launch survives, in the words of reconcile's report, strongest source first.
WHY = {"leader": "leader alive", "process group": "process group not empty",
       "tracked descendant": "descendant alive",
       "launch key in environment": "processes carry the launch key",
       "cgroup member": "cgroup not empty"}
assert tuple(WHY) == REASONS, "every reason evidence gives has its words here, in order"
UNRECORDED = "this home in its environment, no launch of it recorded"


@dataclass(frozen=True)
class Survivor:
    launch_key: str
    pids: list[int]
    why: str


def survivors(found: dict[str, Found]) -> list[Survivor]:
    """One per launch that still has a process: every pid of it, and the strongest
    reason it counts."""
    return [Survivor(key, sorted(f.pids), next(WHY[w] for w in WHY if w in f.pids.values()))
            for key, f in found.items() if f.pids]


def reconcile(paths: OwnerPaths) -> list[str]:
    """Write the acknowledgement and return the keys proven gone.

    Raises ProcessesAlive naming survivors (nothing written), StateCorrupt, UnsafePath,
    NotFound (no owner state), AlreadyRunning.
    Returns an empty list when no reconciliation is needed.
    """
    lock = paths.take_existing_lock()  # refuses while an owner runs; held until we return
    try:
        return reconcile_locked(paths)
    finally:
        os.close(lock)


def refuse_inside_app(paths: OwnerPaths) -> None:
    """Raise BadRequest when this command runs inside one of this home's apps: it could
    not prove the app gone that runs it, nor stop it without stopping itself."""
    pid = inside_app(paths.home_marker)
    if pid is not None:
        raise BadRequest(f"this command runs inside a process of this home's apps (pid "
                         f"{pid} carries {OWNER_HOME_ENV}): run it from a shell outside "
                         "them", {"pid": pid})


def reconcile_locked(paths: OwnerPaths) -> list[str]:
    """:func:`reconcile` for a caller that holds the owner lock already. Besides the
    launches owner.db records, any process carrying this home in its environment counts
    (``unrecorded``): owner.db may have lost its records. A missing owner.db is not
    created here."""
    refuse_inside_app(paths)
    rec = read_receipt(paths.receipt)
    boot = boot_id()
    seen = recorded(paths.db, boot, paths.home_marker)
    quiet = not needs_reconcile(rec, boot) and seen.live_this_boot == 0 \
        and not seen.outlived
    if quiet and rec is not None:
        return []
    scan = environ_scan(seen.suspects)
    if quiet and not unrecorded(seen.suspects, {}, scan):   # as admit_start's strays
        return []
    found = find(seen.suspects, scan)
    alive = survivors(found) + [Survivor(key, sorted(pids), UNRECORDED) for key, pids in
                                unrecorded(seen.suspects, found, scan).items()]
    if alive:
        raise ProcessesAlive(
            f"{counted(len(alive), 'launch', 'launches')} of the dead owner still "
            f"{'has' if len(alive) == 1 else 'have'} processes; stop them "
            "(`tenure owner reconcile --prepare`, then `--drain DIGEST`, or by pid) and "
            "run reconcile again",
            {"survivors": [{"launch_key": s.launch_key, "pids": s.pids, "why": s.why}
                           for s in alive]})
    proven = list(found)
    write_ack(paths.ack, rec, boot, proven)
    return proven


def counted(n: int, one: str, many: str) -> str:
    """'1 launch', '3 launches': the count with the noun that agrees with it."""
    return f"{n} {one if n == 1 else many}"
