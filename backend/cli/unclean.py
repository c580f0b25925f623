"""`tenure down` when no owner runs: did the last one stop cleanly?

An owner that died (SIGKILL, OOM kill, crash) leaves its applications running,
re-parented to init, and nothing stops them any more. Nothing answers on owner.sock and
nothing listens there, so `down` would find "nothing" and report success. Its receipt
says otherwise: ``running`` (or ``failed``) on this boot, exactly what makes the next
owner refuse to start (owner.receipt.needs_reconcile), until a reconcile has proven its
launches gone and written the one-use acknowledgement for that owner instance.
"""

from __future__ import annotations

from typing import Any

from protocol.errors import ReconcileRequired, StateCorrupt, TenureError, UnsafePath
from protocol.layout import Layout

__all__ = ["reconciled", "refuse_unclean_end", "unclean_end"]


def unclean_end(layout: Layout) -> dict[str, Any] | None:
    """The last owner's receipt when it ended without a clean stop on this boot and no
    reconcile acknowledgement names it (its applications may still run); None when it
    stopped cleanly, on another boot, never ran, or its launches were proven gone.
    Raises what reading the receipt raises (StateCorrupt, UnsafePath): an unreadable
    receipt proves nothing."""
    from owner.paths import OwnerPaths
    from owner.receipt import needs_reconcile, read_receipt
    from protocol.identity import boot_id
    paths = OwnerPaths(layout.home)
    rec = read_receipt(paths.receipt)
    boot = boot_id()
    if rec is None or not needs_reconcile(rec, boot) or _acknowledged(paths.ack, rec, boot):
        return None
    return rec


def reconciled(layout: Layout, instance: str) -> bool:
    """Whether `tenure owner reconcile` proved the launches of owner ``instance`` gone on
    this boot: its one-use acknowledgement names that instance and this boot. Consumes
    nothing: the next owner to start consumes it (owner.receipt.admit_start), and
    without it would refuse to start after that owner's unclean end. Raises nothing."""
    from owner.paths import OwnerPaths
    from protocol.identity import boot_id
    return _acknowledged(OwnerPaths(layout.home).ack, {"instance": instance}, boot_id())


def _acknowledged(ack_path: str, rec: dict[str, Any], boot: str) -> bool:
    """Whether `tenure owner reconcile` proved this owner's launches gone (the
    acknowledgement the next owner consumes names its instance and this boot). An
    unreadable acknowledgement proves nothing."""
    from owner.receipt import ACK_KIND
    from protocol.durable import read_json
    try:
        ack = read_json(ack_path, ACK_KIND)
    except (OSError, TenureError):
        return False
    return ack.get("instance") == rec["instance"] and ack.get("boot_id") == boot


def refuse_unclean_end(layout: Layout, stopped: dict[str, Any]) -> None:
    """Raise ReconcileRequired when no owner runs and the last one died without a clean
    stop (:func:`unclean_end`); ``stopped``: what `down` stopped before (named in the
    message, kept in the error's data). A receipt that cannot be read is raised as
    its own error, with what to do."""
    try:
        rec = unclean_end(layout)
    except (StateCorrupt, UnsafePath) as exc:
        raise type(exc)(f"no owner runs, and its shutdown receipt cannot be read: "
                        f"{exc.msg}; whether its applications still run is unknown. "
                        f"{_done(stopped)}Check with `tenure owner reconcile --prepare` "
                        "(docs/reconcile.md)", {**exc.data, "stopped": stopped}) from None
    if rec is None:
        return
    stage = f" at stage {rec['failed_stage']}" if rec.get("failed_stage") else ""
    raise ReconcileRequired(
        f"the owner (instance {rec['instance']}, pid {rec.get('pid')}) died without a "
        f"clean stop: its receipt says {rec['state']}{stage} on this boot, so its "
        "applications may still run, outside tenure's control, and `down` cannot stop "
        f"them. {_done(stopped)}Run `tenure owner reconcile --prepare` to list them, "
        "then `tenure owner reconcile --drain DIGEST` to stop exactly those "
        "(docs/reconcile.md)",
        {"previous": rec["instance"], "pid": rec.get("pid"), "receipt": rec["state"],
         "failed_stage": rec.get("failed_stage"), "stopped": stopped})


def _done(stopped: dict[str, Any]) -> str:
    """'Stopped: guardian, backend. ' (what `down` did stop), or ''."""
    names = [name for name in ("guardian", "backend") if stopped.get(name)]
    return f"Stopped: {', '.join(names)}. " if names else ""
