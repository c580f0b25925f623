"""Combine repeated benchmark runs into one result, and tenure's ratio to the best peer.

Pure functions over the JSON-shaped dicts that bench/suite.py produces; no I/O, so that
bench/peers/render.py (another interpreter) and the unit tests can use them too.

A numeric figure ``key`` of a scenario becomes the median over the runs that produced
it, with ``key_min``, ``key_max`` and ``key_spread`` beside it, where the spread is
(max - min) / |median| (0 when every run agrees; None when the median is 0 and the runs
differ). Each scenario keeps its runs, unchanged, under ``per_run``. A scenario that
failed in any run carries ``error`` (how many runs failed, and why); its figures are
the medians of the runs that succeeded.
"""

from __future__ import annotations

import collections
import statistics
from collections.abc import Callable
from typing import Any

# A figure whose spread is wider than this is flagged in docs/benchmarks.md.
SPREAD_FLAG = 0.30
STAT_SUFFIXES = ("_min", "_max", "_spread")
NOT_RUN = {"error": "not run: an earlier scenario of its session failed"}


def is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def stats(values: list[float]) -> tuple[float, float, float, float | None]:
    """(median, min, max, spread) of a non-empty list. Raises ValueError if empty."""
    if not values:
        raise ValueError("no values")
    med, lo, hi = statistics.median(values), min(values), max(values)
    if med:
        return med, lo, hi, (hi - lo) / abs(med)
    return med, lo, hi, (0.0 if hi == lo else None)


def _concat(lists: list[list[Any]]) -> list[Any]:
    return [x for lst in lists for x in lst]


def _union(lists: list[list[Any]]) -> list[Any]:
    return sorted(set(_concat(lists)))


# How the runs' values of a list-valued figure combine; other lists are concatenated.
LIST_MERGE: dict[str, Callable[[list[list[Any]]], list[Any]]] = {
    "samples_ms": _concat,  # every restart sample of every run
    "pids": _concat,  # the supervisor's own pids, run after run
    "exit_codes": _union,  # every exit status the status CLI returned
    "files": _union,
}


def merge_key(key: str, values: list[Any]) -> dict[str, Any]:
    """One figure over several runs: the entries it contributes to the merged scenario.

    Numbers (None where a run had no value) -> median and its stats; booleans -> the
    value most runs gave (the first run's on a tie); lists -> LIST_MERGE; anything
    else -> the first run's value.
    """
    present = [v for v in values if v is not None]
    if not present:
        return {key: None}
    if all(is_number(v) for v in present):
        med, lo, hi, spread = stats(present)
        if all(isinstance(v, int) for v in present) and med == int(med):
            med = int(med)  # a count stays a count when an even number of runs agree
        return {key: med, f"{key}_min": lo, f"{key}_max": hi, f"{key}_spread": spread}
    if all(isinstance(v, bool) for v in present):
        return {key: collections.Counter(present).most_common(1)[0][0]}
    if all(isinstance(v, list) for v in present):
        return {key: LIST_MERGE.get(key, _concat)(present)}
    return {key: present[0]}


def merge_scenario(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One scenario's results over several runs (see the module docstring)."""
    ok = [r for r in runs if "error" not in r]
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for r in ok for k in r):
        out.update(merge_key(key, [r.get(key) for r in ok]))
    errors = [str(r["error"]) for r in runs if "error" in r]
    if errors:
        why = "; ".join(dict.fromkeys(errors))
        out["error"] = f"{len(errors)} of {len(runs)} runs failed: {why}"
    out["per_run"] = runs
    return out


def merge_session(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One supervisor with N programs over several runs of bench/suite.run_session.

    A scenario a run did not reach (its start failed) counts as a failed run.
    """
    extras = ("commands", "stop")
    scenarios = dict.fromkeys(k for r in runs for k in r if k not in extras)
    out = {s: merge_scenario([r.get(s, NOT_RUN) for r in runs]) for s in scenarios}
    out["commands"] = _first_commands(runs)
    stops = [r.get("stop", {}) for r in runs]
    errors = [str(s["error"]) for s in stops if s.get("error")]
    out["stop"] = {"error": "; ".join(errors) or None,
                   "exit_statuses": [s.get("exit_status") for s in stops],
                   "swept": _concat([s.get("swept", []) for s in stops])}
    return out


def merge_logs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The logs scenario of one supervisor over several runs of bench/suite.run_logs."""
    out = merge_scenario([{k: v for k, v in r.items() if k != "commands"} for r in runs])
    out["commands"] = _first_commands(runs)
    return out


def _first_commands(runs: list[dict[str, Any]]) -> dict[str, str]:
    """Each command as the first run that ran it recorded it (later runs differ only in
    their temp directory)."""
    out: dict[str, str] = {}
    for r in runs:
        for key, cmd in r.get("commands", {}).items():
            out.setdefault(key, cmd)
    return out


def merge_components(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each component benchmark over the repetitions, merged like a scenario: a failed
    run (its ``error``) is left out of the medians and named in the merged ``error``."""
    return {name: merge_scenario(rs) for name, rs in runs.items()}


def failures(supervisors: dict[str, Any],
             components: dict[str, Any] | None = None) -> list[str]:
    """'<supervisor> <N> <scenario>: <error>' for every scenario that failed in any run,
    and 'tenure component <name>: <error>' for every component benchmark that did, so
    that a result missing either is not published as if complete."""
    out = []
    for name, entry in supervisors.items():
        for n, sess in entry["sessions"].items():
            out += [f"{name} n={n} {sc}: {data['error']}" for sc, data in sess.items()
                    if isinstance(data, dict) and sc != "stop" and "error" in data]
        if "error" in entry["logs"]:
            out.append(f"{name} logs: {entry['logs']['error']}")
    out += [f"tenure component {name}: {data['error']}"
            for name, data in (components or {}).items() if "error" in data]
    return out


# ratio key -> (scenario, figure, higher is better). Each is tenure's median divided by
# the best peer's median, per program count (logs do not depend on it: same per count).
RATIOS: dict[str, tuple[str, str, bool]] = {
    "ratio_rss": ("memory", "rss_mib", False),
    "ratio_start_all_running": ("start", "all_running_s", False),
    "ratio_start_returned": ("start", "start_cmd_s", False),
    "ratio_status": ("status", "median_ms", False),
    "ratio_restart": ("restart", "median_ms", False),
    "ratio_logs": ("logs", "lines_per_s", True),
    "ratio_replace_returned": ("replace", "cmd_s", False),
}


def _figure(entry: dict[str, Any], n: str, scenario: str, key: str) -> float | None:
    data = entry["logs"] if scenario == "logs" else entry["sessions"].get(n, {}).get(scenario)
    if not isinstance(data, dict) or "error" in data:
        return None
    v = data.get(key)
    return float(v) if is_number(v) and v > 0 else None


def ratios(supervisors: dict[str, Any],
           ns: list[str]) -> tuple[dict[str, dict[str, float | None]],
                                   dict[str, dict[str, str | None]]]:
    """({N: {ratio key: tenure / best peer}}, {N: {ratio key: that peer}}).

    A ratio is None when tenure's figure or every peer's is missing or failed. Without a
    tenure entry both are empty.
    """
    if "tenure" not in supervisors:
        return {}, {}
    values: dict[str, dict[str, float | None]] = {}
    best: dict[str, dict[str, str | None]] = {}
    for n in ns:
        values[n], best[n] = {}, {}
        for rkey, (scenario, key, higher) in RATIOS.items():
            t = _figure(supervisors["tenure"], n, scenario, key)
            peers = {p: _figure(e, n, scenario, key) for p, e in supervisors.items()
                     if p != "tenure"}
            known = {p: v for p, v in peers.items() if v is not None}
            if t is None or not known:
                values[n][rkey], best[n][rkey] = None, None
                continue
            peer = (max if higher else min)(known, key=known.__getitem__)
            values[n][rkey], best[n][rkey] = t / known[peer], peer
    return values, best
