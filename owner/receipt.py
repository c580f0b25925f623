"""The owner's shutdown receipt and the reconcile acknowledgement.

``owner-receipt.json`` says ``running`` while an owner lives. A shutdown walks the stages
in :data:`STAGES` and ends ``clean`` only if every one succeeded, otherwise ``failed``
naming the stage. A start that finds ``running`` or ``failed`` from this same boot knows
the previous owner may have left processes behind: it refuses until ``reconcile`` has
proven every recorded launch gone and written a one-use acknowledgement.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from protocol.durable import atomic_write_json, read_json
from protocol.errors import ReconcileRequired, StateCorrupt, TenureError
from protocol.schema import is_count

__all__ = ["DAMAGED", "STAGES", "Receipt", "ReceiptState", "admit_start", "keep_receipt",
           "write_ack"]

log = logging.getLogger("tenure.owner")

RECEIPT_KIND = "tenure-owner-receipt"
ACK_KIND = "tenure-owner-reconcile-ack"
STAGES = ("watchers", "applications", "processes", "state", "logs", "rpc", "storage",
          "complete")


class ReceiptState(StrEnum):
    RUNNING = "running"
    CLEAN = "clean"
    FAILED = "failed"


@dataclass
class Receipt:
    """The live receipt of this owner; every change is written atomically at once."""

    path: str
    instance: str
    pid: int
    boot_id: str
    state: ReceiptState = ReceiptState.RUNNING
    started_at: float = field(default_factory=time.time)
    stages: list[dict[str, Any]] = field(default_factory=list)
    failed_stage: str | None = None
    # the home was lost (protocol.homewatch): the path now belongs to another owner
    detached: bool = False
    # a write failed (a full disk): the receipt on disk says less than this one
    unwritten: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": RECEIPT_KIND, "format": 1, "state": str(self.state),
                "instance": self.instance, "pid": self.pid, "boot_id": self.boot_id,
                "started_at": self.started_at, "stages": self.stages,
                "failed_stage": self.failed_stage, "updated_at": time.time()}

    def write(self) -> None:
        if not self.detached:
            atomic_write_json(self.path, self.to_json())

    def stage(self, name: str, ok: bool, detail: str = "") -> None:
        """Record one shutdown stage; the first failure decides the final state."""
        if name not in STAGES:
            raise ValueError(f"unknown stage {name}")
        self.stages.append({"stage": name, "ok": ok, "detail": detail, "at": time.time()})
        if not ok and self.failed_stage is None:
            self.failed_stage = name
        if name == "complete":
            self.state = ReceiptState.CLEAN if self.failed_stage is None else \
                ReceiptState.FAILED
        try:
            self.write()
        except (OSError, TenureError) as exc:   # the shutdown goes on: apps are stopped
            if self.unwritten is None:
                log.error("could not write the shutdown receipt (%s); the shutdown goes "
                          "on, its stages are in this log, and the next start asks for "
                          "a reconcile", exc)
            self.unwritten = str(exc)


DAMAGED = ("a damaged receipt may be set aside: owner.db, not the receipt, decides what "
           "a start needs proven gone (`tenure owner reconcile`; docs/reconcile.md)")
"""The way out a refusal of a damaged receipt ends with: a start without it is refused
while owner.db records launches of this boot, as with it."""
_STATES = frozenset(s.value for s in ReceiptState)
_INSTANCE = re.compile(r"[A-Za-z0-9_-]{1,64}")   # a file name in the archive (keep_receipt)


def read_receipt(path: str) -> dict[str, Any] | None:
    """The last receipt, or None when there is none: its state one of ReceiptState, its
    boot id a string, its instance a plain name and its pid a positive integer (what a
    start's refusal names and the archive files it under). Raises StateCorrupt,
    UnsafePath."""
    try:
        rec = read_json(path, RECEIPT_KIND)
    except FileNotFoundError:
        return None
    except StateCorrupt as exc:
        raise StateCorrupt(f"{exc.msg}; {DAMAGED}", exc.data) from None
    state, instance, pid = rec.get("state"), rec.get("instance"), rec.get("pid")
    if not isinstance(state, str) or state not in _STATES or \
            not isinstance(rec.get("boot_id"), str) or \
            not isinstance(instance, str) or not _INSTANCE.fullmatch(instance) or \
            not is_count(pid, 1):
        raise StateCorrupt(f"{path} is not a receipt this owner can read: its state, boot "
                           f"id, instance or pid is missing or malformed; {DAMAGED}",
                           {"path": path})
    return rec


def needs_reconcile(rec: dict[str, Any] | None, boot_id: str) -> bool:
    """A previous owner on this boot that did not finish a clean shutdown."""
    return rec is not None and rec["state"] != ReceiptState.CLEAN and rec["boot_id"] == boot_id


def admit_start(receipt_path: str, ack_path: str, boot_id: str, live_this_boot: int = 0,
                archive: str | None = None, lingering: int = 0, strays: int = 0
                ) -> dict[str, Any] | None:
    """Decide whether an owner may start. Returns the previous receipt when a reconcile
    acknowledgement was consumed for it (its launches are proven gone), else None.

    The receipt alone is no proof: when owner.db still records launches of this boot as
    live (``live_this_boot``), or processes of ended launches still run (``lingering``:
    recorded descendants or cgroup members that outlived their leader), or processes
    carry this home in their environment with no receipt to say how the last owner
    ended (``strays``: owner.db and the receipt set aside), a start needs an
    acknowledgement whatever the receipt says (a hand-edited or deleted receipt changes
    nothing). An unclean previous receipt is kept in ``archive`` as evidence before the
    new owner's receipt replaces it.

    Raises ReconcileRequired (no valid acknowledgement), StateCorrupt, UnsafePath.
    """
    rec = read_receipt(receipt_path)
    if rec is not None and rec["state"] != ReceiptState.CLEAN and archive is not None:
        keep_receipt(rec, archive)
    if not needs_reconcile(rec, boot_id) and live_this_boot == 0 and lingering == 0 \
            and strays == 0:
        return None
    try:
        ack = read_json(ack_path, ACK_KIND)
    except FileNotFoundError:
        ack = None
    expected = rec["instance"] if rec is not None else None
    if ack is None or ack.get("instance") != expected or ack.get("boot_id") != boot_id:
        raise ReconcileRequired(_why(rec, live_this_boot, lingering, strays),
                                {"previous": expected, "live_launches": live_this_boot,
                                 "lingering_processes": lingering, "strays": strays})
    os.unlink(ack_path)  # one use: a later crash needs a fresh proof
    return rec if rec is not None else {"instance": None, "boot_id": boot_id,
                                        "state": "missing"}


def _why(rec: dict[str, Any] | None, live: int, lingering: int, strays: int = 0) -> str:
    how = ("`tenure owner reconcile --prepare` to list what may still run, then `tenure "
           "owner reconcile --drain DIGEST` to stop exactly that (docs/reconcile.md)")
    if rec is not None and rec["state"] != ReceiptState.CLEAN:
        return (f"the previous owner (instance {rec['instance']}, pid {rec['pid']}) ended "
                f"{rec['state']} on this boot, and its applications may still run: run "
                f"{how}")
    what = " and ".join(
        ([f"{live} launches of this boot as live"] if live else []) +
        ([f"{lingering} processes of ended launches still running"] if lingering else []))
    if not what:
        return (f"{strays} processes carry this home in their environment, and there is "
                f"no receipt of how the previous owner ended: they may be its "
                f"applications; run {how}")
    return (f"owner.db records {what} although the receipt says "
            f"{'clean' if rec else 'nothing'}: the receipt is no proof; run {how}")


def keep_receipt(rec: dict[str, Any], archive: str, keep: int = 20) -> str:
    """Copy an unclean receipt into ``archive`` (0700) as evidence; the newest ``keep``
    stay. Returns its path."""
    from protocol.sockets import ensure_private_dir
    directory = Path(archive)
    ensure_private_dir(directory, root=directory.parent, above=False)   # execution/
    path = directory / f"{rec['instance']}.json"
    if not path.exists():
        atomic_write_json(path, rec)
    old = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in old[keep:]:
        if stale != path:   # after the clock was set back it may sort as the oldest
            stale.unlink()
    return str(path)


def write_ack(ack_path: str, rec: dict[str, Any] | None, boot_id: str,
              proven: list[str]) -> None:
    """The one-use acknowledgement for the previous owner ``rec`` (None: there was no
    receipt, only launches of this boot recorded live)."""
    atomic_write_json(ack_path, {"kind": ACK_KIND, "format": 1,
                                 "instance": rec["instance"] if rec else None,
                                 "boot_id": boot_id, "proven_gone": proven,
                                 "created_at": time.time()})
