"""``python -m owner reconcile``: prove that a dead owner's launches are gone.

A launch is proven gone when its recorded process (pid with the same start ticks) no
longer exists, its process group has no member, and (for a launch that was being started
when the owner died) no process on the machine carries its launch key in its
environment. Only then is a one-use acknowledgement written that lets the next owner
start. Nothing is killed here: the operator decides what to stop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from protocol.errors import ProcessesAlive
from protocol.identity import boot_id
from protocol.procfs import environ_matches, running

from .descendants import LAUNCH_KEY_ENV
from .paths import OwnerPaths
from .procinfo import group_members
from .receipt import needs_reconcile, read_receipt, write_ack
from .store import LaunchRow, OwnerStore

__all__ = ["Survivor", "reconcile", "reconcile_locked"]


@dataclass(frozen=True)
class Survivor:
    launch_key: str
    pids: list[int]
    why: str


def _carriers(keys: set[str]) -> dict[str, list[int]]:
    """Processes whose environment names one of ``keys`` (readable as root or same uid)."""
    needles = {f"{LAUNCH_KEY_ENV}={k}".encode(): k for k in keys}
    return {needles[n]: pids for n, pids in environ_matches(needles).items()}


def survivors(rows: list[LaunchRow]) -> list[Survivor]:
    out = []
    carriers = _carriers({r.launch_key for r in rows})
    for r in rows:
        if r.pid is not None and r.start_ticks is not None and running(r.pid, r.start_ticks):
            out.append(Survivor(r.launch_key, [r.pid], "leader alive"))
        elif r.pgid is not None and (members := group_members(r.pgid)):
            out.append(Survivor(r.launch_key, members, "process group not empty"))
        elif r.launch_key in carriers:
            out.append(Survivor(r.launch_key, carriers[r.launch_key],
                                "processes carry the launch key"))
    return out


def reconcile(paths: OwnerPaths) -> list[str]:
    """Write the acknowledgement and return the keys proven gone.

    Raises ProcessesAlive naming survivors (nothing written), StateCorrupt, UnsafePath.
    Returns an empty list when no reconciliation is needed.
    """
    lock = paths.take_lock()  # refuses while an owner runs; held until we return
    try:
        return reconcile_locked(paths)
    finally:
        os.close(lock)


def reconcile_locked(paths: OwnerPaths) -> list[str]:
    """:func:`reconcile` for a caller that holds the owner lock already."""
    rec = read_receipt(paths.receipt)
    store = OwnerStore(paths.db)
    try:
        rows = store.live_launches()
        live_this_boot = store.live_launches_of_boot(boot_id())
    finally:
        store.close()
    if not needs_reconcile(rec, boot_id()) and live_this_boot == 0:
        return []
    alive = survivors(rows)
    if alive:
        raise ProcessesAlive(
            f"{len(alive)} launches of the dead owner still have processes; stop them "
            "(by pid) and run reconcile again",
            {"survivors": [{"launch_key": s.launch_key, "pids": s.pids, "why": s.why}
                           for s in alive]})
    proven = [r.launch_key for r in rows]
    write_ack(paths.ack, rec, boot_id(), proven)
    return proven
