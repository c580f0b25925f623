"""Metric families of a snapshot: what is unknown is absent (never 0), exits carry every
reason, and latency histograms are valid exposition (parsed back by prometheus_client)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from backend.metrics import TenureCollector
from protocol.timing import Timings


def _snap(**extra: Any) -> dict[str, Any]:
    timings = Timings()
    timings.observe("status", 0.0004)
    timings.observe("status", 0.2)
    app = {"key": "s/a/0", "stack": "s", "app": "a", "instance": 0, "state": "ready",
           "up": True, "ready": True, "restarts": 2, "pid": 10, "start_time_seconds": 1.0,
           "exits": {"requested": 2}, "cpu_seconds": 1.0, "memory_bytes": 10,
           "memory_peak_bytes": 20, "oom_kills": None, "pids": 1, "io_read_bytes": 0,
           "io_write_bytes": 0}
    return {"epoch": 3, "owner_connected": True, "certificate_age_seconds": None,
            "log_dropped": [], "logs": None, "journal_bytes": None, "guardian": None,
            "rpc": timings.snapshot(), "owner_calls": {}, "apps": [app], **extra}


def _scrape(snap: dict[str, Any]) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(TenureCollector(lambda: snap))
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_unknown_sources_are_absent_not_zero() -> None:
    got = _scrape(_snap())
    for name in ("tenure_handoffs_total", "tenure_handoff_pause_seconds_count",
                 "tenure_app_log_lines_total", "tenure_journal_bytes"):
        assert name not in got
    exits = got["tenure_app_exits_total"]
    lv = (("app", "a"), ("instance", "0"))
    assert exits[(*lv, ("reason", "requested"), ("stack", "s"))] == 2
    assert exits[(*lv, ("reason", "signal"), ("stack", "s"))] == 0


def test_journal_handoffs_and_latency_when_known() -> None:
    guardian = {"handoffs": {"success": 3, "aborted": 1},
                "pause": {"buckets": [[0.25, 1], [0.5, 3]], "sum": 1.1, "count": 3}}
    got = _scrape(_snap(logs=[{"stack": "s", "app": "a", "lines": 5, "bytes": 40}],
                        journal_bytes=4096, guardian=guardian))
    assert got["tenure_app_log_lines_total"][(("app", "a"), ("stack", "s"))] == 5
    assert got["tenure_app_log_bytes_total"][(("app", "a"), ("stack", "s"))] == 40
    assert got["tenure_journal_bytes"][()] == 4096
    assert got["tenure_handoffs_total"][(("outcome", "success"),)] == 3
    assert got["tenure_handoff_pause_seconds_bucket"][(("le", "+Inf"),)] == 3
    rpc = got["tenure_rpc_request_duration_seconds_bucket"]
    assert rpc[(("le", "0.0005"), ("method", "status"))] == 1
    assert rpc[(("le", "0.25"), ("method", "status"))] == 2
    assert got["tenure_rpc_request_duration_seconds_count"][(("method", "status"),)] == 2


def test_docs_list_every_family_with_its_type() -> None:
    import re
    from pathlib import Path

    from backend.metrics import families
    docs = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text()
    documented = dict(re.findall(r"^\| `(tenure_\w+)` \| (\w+)", docs, re.M))
    guardian = {"handoffs": {"success": 1},
                "pause": {"buckets": [[0.25, 1]], "sum": 0.2, "count": 1}}
    snap = _snap(logs=[{"stack": "s", "app": "a", "lines": 1, "bytes": 1}],
                 journal_bytes=1, guardian=guardian, certificate_age_seconds=1.0,
                 owner_calls={"status": {"buckets": [[0.1, 1]], "sum": 0.01, "count": 1}})
    snap["apps"][0]["oom_kills"] = 0
    emitted = {}
    for fam in families(snap):
        suffix = "_total" if fam.type == "counter" else ""
        emitted[fam.name + suffix] = fam.type
    assert emitted == documented


def test_lines_dropped_are_zero_when_none_were_and_absent_when_unknown() -> None:
    from backend.cli.render_metrics import metrics
    from backend.metrics import _log_dropped
    apps = _snap()["apps"]
    known = _log_dropped({("s", "job:nightly"): 3}, apps)
    assert known == [{"stack": "s", "app": "a", "dropped": 0},
                     {"stack": "s", "app": "job:nightly", "dropped": 3}]
    got = _scrape(_snap(log_dropped=known))["tenure_app_log_lines_dropped_total"]
    assert got[(("app", "a"), ("stack", "s"))] == 0
    assert _log_dropped(None, apps) is None
    assert "tenure_app_log_lines_dropped_total" not in _scrape(_snap(log_dropped=None))
    text = metrics({**_snap(log_dropped=None, owner_connected=False), "listener": None})
    assert "\nlog lines dropped: unknown\n" in text
