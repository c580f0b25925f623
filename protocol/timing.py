"""Latency histograms per RPC method, cheap enough to keep on every call.

``Timings.observe`` is one ``bisect`` and three in-place additions; readers take a
``snapshot`` (plain data) and turn it into whatever they expose (the backend makes
Prometheus histograms of it, ``tenure_rpc_request_duration_seconds``). Only the thread of
the event loop that serves or calls observes; a snapshot from another thread copies lists
that may be mid-update, which can only skew one sample between buckets, never lose one.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

__all__ = ["BUCKETS", "Timings"]

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
           5.0, 10.0, 30.0)
"""Upper bounds in seconds (+Inf implied): local RPCs take ~0.1 ms, a stop can take
its whole stop timeout."""


class Timings:
    """Per-method counts per bucket (non-cumulative, the last is +Inf), sum and count.
    Record only methods from a fixed set (a server's dispatch table), so the label set
    stays bounded."""

    def __init__(self, buckets: tuple[float, ...] = BUCKETS) -> None:
        self.buckets = buckets
        self._by_method: dict[str, list[Any]] = {}

    def observe(self, method: str, seconds: float) -> None:
        row = self._by_method.get(method)
        if row is None:
            row = self._by_method[method] = [[0] * (len(self.buckets) + 1), 0.0, 0]
        row[0][bisect_left(self.buckets, seconds)] += 1
        row[1] += seconds
        row[2] += 1

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """``{method: {buckets: [[le, cumulative count]...], sum, count}}``, le ascending
        and without +Inf (its count is ``count``)."""
        out: dict[str, dict[str, Any]] = {}
        for method, (counts, total, n) in sorted(self._by_method.items()):
            cumulative, running = [], 0
            for le, c in zip(self.buckets, counts, strict=False):
                running += c
                cumulative.append([le, running])
            out[method] = {"buckets": cumulative, "sum": total, "count": n}
        return out
