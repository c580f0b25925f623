"""Human output of ``tenure metrics``: the numbers the Prometheus exposition shows."""

from __future__ import annotations

import time
from typing import Any

from .present import dur, fields, size, table

__all__ = ["metrics"]

HEADER = ["INSTANCE", "STATE", "READY", "RESTARTS", "UPTIME", "CPU", "MEM", "PEAK", "PIDS",
          "OOM"]


def _count(n: int | None) -> str:
    return "-" if n is None else str(n)


def _row(a: dict[str, Any], now: float, current: bool) -> list[str]:
    """``current``: whether the backend's view of the owner is; if not, the state is
    what was last seen, shown as ``unknown (last seen S)`` as `tenure status` does."""
    start = a["start_time_seconds"]
    state = a["state"] if current else f"unknown (last seen {a['state']})"
    ready = ("yes" if a["ready"] else "no") if current else "-"
    return [a["key"], state, ready, str(a["restarts"]),
            dur(None if start is None else now - start), dur(a["cpu_seconds"]),
            size(a["memory_bytes"]), size(a["memory_peak_bytes"]), _count(a["pids"]),
            _count(a["oom_kills"])]


def metrics(r: dict[str, Any]) -> str:
    """The instance table, then the control plane (``-`` where nothing is known)."""
    now = time.time()
    rows = [_row(a, now, bool(r["owner_connected"])) for a in r["apps"]]
    listener = r.get("listener") or {}
    serving = listener.get("listen") or "off"
    if listener.get("listen") and not listener.get("bound"):
        serving += f" (not bound: {listener.get('error') or 'binding'})"
    dropped = "unknown" if r["log_dropped"] is None else \
        str(sum(d["dropped"] for d in r["log_dropped"]))
    control = fields([("epoch", str(r["epoch"])),
                      ("owner", "connected" if r["owner_connected"] else "not connected"),
                      ("certificate age", dur(r["certificate_age_seconds"])),
                      ("log lines dropped", dropped),
                      ("prometheus", serving)])
    body = table(rows, HEADER) if rows else "no instances"
    return f"{body}\n\n{control}"
