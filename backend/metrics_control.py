"""The metric families beyond the per-instance basics (backend.metrics): exits by reason,
the owner's journal, hot handoffs and RPC latency. Pure functions from a snapshot to
``prometheus_client`` families, plus :func:`guardian_counters`, which asks the guardian.

A figure nobody can give is left out, never 0: an owner without ``logCounts`` 1 gives no
journal families; a guardian that does not answer (or predates its ``metrics`` method)
gives no handoff families.
"""

from __future__ import annotations

import math
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from protocol.aclient import AsyncClient
from protocol.errors import TenureError
from protocol.layout import Layout

from .instance_types import ExitReason

__all__ = [
    "LOG_CAPABILITY",
    "control_plane",
    "exits",
    "guardian_counters",
    "histogram",
    "journal",
]

LOG_CAPABILITY = {"logCounts": 1}
LABELS = ["stack", "app", "instance"]


def exits(apps: list[dict[str, Any]]) -> Metric:
    """``tenure_app_exits_total``: every reason for every instance, 0 included."""
    fam = CounterMetricFamily("tenure_app_exits", "processes of the instance that ended, "
                              "by reason (requested: tenure stopped it)",
                              labels=[*LABELS, "reason"])
    for a in apps:
        lv = [a["stack"], a["app"], str(a["instance"])]
        for reason in ExitReason:
            fam.add_metric([*lv, str(reason)], float(a["exits"].get(str(reason), 0)))
    return fam


def journal(snap: dict[str, Any]) -> list[Metric]:
    """Lines and bytes the owner's journal committed per app, and its size on disk."""
    if snap.get("logs") is None:
        return []
    lines = CounterMetricFamily("tenure_app_log_lines", "log lines the owner's journal "
                                "committed since the owner started", labels=["stack", "app"])
    size = CounterMetricFamily("tenure_app_log_bytes", "bytes of log lines the owner's "
                               "journal committed since the owner started",
                               labels=["stack", "app"])
    for row in snap["logs"]:
        lines.add_metric([row["stack"], row["app"]], float(row["lines"]))
        size.add_metric([row["stack"], row["app"]], float(row["bytes"]))
    out: list[Metric] = [lines, size]
    if snap.get("journal_bytes") is not None:
        out.append(GaugeMetricFamily("tenure_journal_bytes", "size of the owner's log "
                                     "journal on disk (database and WAL)",
                                     value=float(snap["journal_bytes"])))
    return out


def histogram(name: str, doc: str, label: str, rows: dict[str, dict[str, Any]]) -> Metric:
    """A histogram family from ``protocol.timing.Timings.snapshot`` shaped rows."""
    fam = HistogramMetricFamily(name, doc, labels=[label])
    for key, row in sorted(rows.items()):
        buckets = [(_le(le), float(n)) for le, n in row["buckets"]]
        fam.add_metric([key], [*buckets, ("+Inf", float(row["count"]))], row["sum"])
    return fam


def _le(le: float) -> str:
    return "+Inf" if math.isinf(le) else repr(float(le))


def control_plane(snap: dict[str, Any]) -> list[Metric]:
    """Handoffs from the guardian (when it answered) and RPC latency of this backend."""
    out: list[Metric] = []
    g = snap.get("guardian")
    if g is not None:
        handoffs = CounterMetricFamily("tenure_handoffs", "hot backend handoffs (upgrade, "
                                       "rollback) that ended, by outcome",
                                       labels=["outcome"])
        for outcome, n in sorted(g["handoffs"].items()):
            handoffs.add_metric([outcome], float(n))
        pause = HistogramMetricFamily("tenure_handoff_pause_seconds", "control-plane pause "
                                      "of a handoff: from draining to the candidate started")
        p = g["pause"]
        pause.add_metric([], [*((_le(le), float(n)) for le, n in p["buckets"]),
                              ("+Inf", float(p["count"]))], p["sum"])
        out += [handoffs, pause]
    out.append(histogram("tenure_rpc_request_duration_seconds", "time to serve a request "
                         "of the backend's API, by method", "method", snap["rpc"]))
    out.append(histogram("tenure_owner_call_duration_seconds", "time from sending a call "
                         "to the owner to its answer, by method", "method",
                         snap["owner_calls"]))
    return out


async def guardian_counters(layout: Layout, timeout: float = 2.0) -> dict[str, Any] | None:
    """The guardian's ``metrics`` answer, or None when it cannot answer (not running,
    busy past ``timeout``, or older than its ``metrics`` 1 capability). Raises nothing
    of its own."""
    client = AsyncClient(layout.guardian_sock, role="viewer", want={"metrics": 1},
                         pin=False, timeout=timeout, connect_timeout=timeout,
                         name="backend-metrics")
    try:
        answer: dict[str, Any] = await client.call("metrics")
        return answer
    except TenureError:
        return None
    finally:
        await client.close()
