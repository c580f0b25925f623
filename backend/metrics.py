"""What ``tenure metrics`` and the Prometheus exposition report: one snapshot of the
backend's state and the owner's measurements, and the metric families made from it.

:func:`snapshot` runs on the backend's loop (it reads instances and asks the owner);
:class:`TenureCollector` runs in the HTTP server's thread at scrape time and gets a
snapshot through the loop, so a scrape always shows the state of that moment. Families
are built with ``prometheus_client``'s metric family classes: the exposition text is the
library's, never written by hand.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from . import metrics_control as mc
from .instance_types import ExitReason, PublicState
from .targets import in_order
from .usage import owner_metrics

if TYPE_CHECKING:
    from .generation import Generation

__all__ = ["SCRAPE_TIMEOUT", "TenureCollector", "families", "named", "snapshot"]

SCRAPE_TIMEOUT = 10.0
LABELS = ["stack", "app", "instance"]
MEASURED = ("cpu_seconds", "memory_bytes", "memory_peak_bytes", "oom_kills", "pids",
            "io_read_bytes", "io_write_bytes")


async def snapshot(gen: Generation) -> dict[str, Any]:
    """Every instance with its state, restarts and the owner's figures for its process
    (matched by pid and start ticks), and the control plane's health. Figures the owner
    cannot give (it predates ``metrics`` 1, is out of reach, or the instance has no
    process) are None; while our view of the owner is not current (``owner_connected``
    false: it has not answered for 5 s) it is not asked. Raises nothing of its own."""
    sup = gen.sup
    assert sup is not None
    connected = gen.link.current()
    answer, guardian = await asyncio.gather(  # at once; a silent owner is not waited for
        owner_metrics(gen.owner, sup.owner_capabilities) if connected else _none(),
        mc.guardian_counters(gen.layout))
    measured = {(r["pid"], r["start_ticks"]): r for r in (answer or {}).get("launches", [])}
    apps = []
    for key in in_order(sup.instances):
        inst = sup.instances[key]
        m = measured.get((inst.pid, inst.start_ticks), {}) if inst.pid is not None else {}
        apps.append({"key": key, "stack": inst.app.stack, "app": inst.app.name,
                     "instance": inst.index, "state": str(inst.public_state),
                     "up": inst.pid is not None, "ready": inst.public_state is
                     PublicState.READY, "restarts": inst.restarts, "pid": inst.pid,
                     # every reason, 0 included, as tenure_app_exits_total has them
                     "exits": {str(r): inst.exits.get(r, 0) for r in ExitReason},
                     "start_time_seconds": m.get("started_at"),
                     **{name: m.get(name) for name in MEASURED}})
    certified = gen.certified_at
    counts = sup.owner_capabilities.get("logCounts") == mc.LOG_CAPABILITY["logCounts"] \
        and answer is not None and "logs" in answer
    return {"epoch": gen.epoch, "owner_connected": connected,
            "certificate_age_seconds": None if certified is None
            else max(0.0, time.time() - certified),
            "log_dropped": _log_dropped(gen.log_dropped, apps) if connected else None,
            "logs": answer["logs"] if counts and answer else None,
            "journal_bytes": answer.get("journal_bytes") if counts and answer else None,
            "guardian": guardian,
            "rpc": gen.rpc_timings.snapshot(), "owner_calls": gen.owner_timings.snapshot(),
            "apps": apps}


def _log_dropped(dropped: dict[tuple[str, str], int] | None, apps: list[dict[str, Any]]
                 ) -> list[dict[str, Any]] | None:
    """Lines the owner dropped, per app: every app of ``apps`` (0 when the owner named
    it not: nothing dropped is a known 0) and any other it names (a job's output); None
    when the owner cannot say."""
    if dropped is None:
        return None
    counts = {(a["stack"], a["app"]): 0 for a in apps} | dropped
    return [{"stack": s, "app": a, "dropped": n} for (s, a), n in sorted(counts.items())]


async def _none() -> None:
    return None


def _family(kind: type, name: str, doc: str, labels: list[str], unit: str = "") -> Any:
    return kind(name, doc, labels=labels, unit=unit)


def families(snap: dict[str, Any]) -> list[Metric]:
    """The metric families of one snapshot (see docs/metrics.md). Pure."""
    g, c = GaugeMetricFamily, CounterMetricFamily
    up = _family(g, "tenure_app_up", "1 while the instance has a running process", LABELS)
    ready = _family(g, "tenure_app_ready", "1 while the instance is ready", LABELS)
    state = _family(g, "tenure_app_state", "1 for the instance's current public state",
                    [*LABELS, "state"])
    restarts = _family(c, "tenure_app_restarts", "restarts of the instance", LABELS)
    start = _family(g, "tenure_app_start_time_seconds",
                    "when the current process started, Unix time", LABELS)
    per_app: list[tuple[str, Any]] = [
        ("cpu_seconds", _family(c, "tenure_app_cpu_seconds",
                                "CPU time (user + system) of the current process and its "
                                "children", LABELS)),
        ("memory_bytes", _family(g, "tenure_app_memory_bytes", "memory in use", LABELS)),
        ("memory_peak_bytes", _family(g, "tenure_app_memory_peak_bytes",
                                      "highest memory use of the current process", LABELS)),
        ("oom_kills", _family(c, "tenure_app_oom_kills", "processes killed by the OOM "
                                                          "killer (per-app cgroups only)",
                              LABELS)),
        ("pids", _family(g, "tenure_app_pids", "processes of the instance", LABELS)),
        ("io_read_bytes", _family(c, "tenure_app_io_read_bytes", "bytes read from storage",
                                  LABELS)),
        ("io_write_bytes", _family(c, "tenure_app_io_write_bytes",
                                   "bytes written to storage", LABELS))]
    for a in snap["apps"]:
        lv = [a["stack"], a["app"], str(a["instance"])]
        up.add_metric(lv, 1.0 if a["up"] else 0.0)
        ready.add_metric(lv, 1.0 if a["ready"] else 0.0)
        for s in PublicState:
            state.add_metric([*lv, str(s)], 1.0 if a["state"] == s else 0.0)
        restarts.add_metric(lv, float(a["restarts"]))
        if a["start_time_seconds"] is not None:
            start.add_metric(lv, float(a["start_time_seconds"]))
        for name, fam in per_app:
            if a[name] is not None:
                fam.add_metric(lv, float(a[name]))
    dropped = _family(c, "tenure_app_log_lines_dropped",
                      "log lines the owner dropped (journal queue full) since it started",
                      ["stack", "app"])
    for d in snap["log_dropped"] or []:
        dropped.add_metric([d["stack"], d["app"]], float(d["dropped"]))
    out = [up, ready, state, restarts, mc.exits(snap["apps"]), start,
           *(f for _, f in per_app), dropped, *mc.journal(snap), *_control(snap),
           *mc.control_plane(snap)]
    return out


def _control(snap: dict[str, Any]) -> list[Metric]:
    epoch = GaugeMetricFamily("tenure_epoch", "the epoch this backend holds",
                              value=float(snap["epoch"]))
    owner = GaugeMetricFamily("tenure_owner_connected",
                              "1 while the backend's view of the owner is current",
                              value=1.0 if snap["owner_connected"] else 0.0)
    out: list[Metric] = [epoch, owner]
    if snap["certificate_age_seconds"] is not None:
        out.append(GaugeMetricFamily(
            "tenure_certificate_age_seconds",
            "seconds since a recovery certificate last vouched for the state",
            value=float(snap["certificate_age_seconds"])))
    return out


def named(metrics: Iterable[Metric], names: Collection[str]) -> Iterator[Metric]:
    """The families of ``metrics`` that ``names`` asks for (``?name[]=``), each whole:
    by its name (``tenure_app_restarts``) or the name of one of its samples
    (``tenure_app_restarts_total``). Pure."""
    for m in metrics:
        if m.name in names or any(s.name in names for s in m.samples):
            yield m


class TenureCollector(Collector):
    """Families of a fresh snapshot per scrape. ``fetch`` gives the snapshot (from the
    scrape thread, through the backend loop); its failure fails the scrape (an HTTP 500
    that Prometheus records as ``up == 0``), never a partial or stale answer."""

    def __init__(self, fetch: Callable[[], dict[str, Any]]) -> None:
        self._fetch = fetch

    def describe(self) -> list[Metric]:
        # registering must not scrape; so prometheus_client cannot tell which names are
        # ours, and its ``?name[]=`` found none (backend.metrics_http.Exposition)
        return []

    def collect(self) -> Iterator[Metric]:
        yield from families(self._fetch())


def fetcher(gen: Generation, loop: asyncio.AbstractEventLoop
            ) -> Callable[[], dict[str, Any]]:
    """A ``fetch`` for :class:`TenureCollector` that runs :func:`snapshot` on ``loop``.
    Raises TimeoutError after SCRAPE_TIMEOUT, or what the snapshot raised."""
    def fetch() -> dict[str, Any]:
        return asyncio.run_coroutine_threadsafe(snapshot(gen), loop).result(SCRAPE_TIMEOUT)
    return fetch
