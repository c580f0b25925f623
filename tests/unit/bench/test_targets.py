"""Tenure's targets against the best peer: verdicts, and the Targets section's rows."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench import aggregate
from bench.peers import report, targets
from bench.peers.targets import (
    BEHIND,
    COMPONENT_TARGETS,
    MET,
    NOT_MEASURED,
    TARGETS,
    Target,
)

# One supervisor's session at one program count: a trimmed bench/results/latest.json.
PEER_SESSION: dict[str, Any] = {
    "start": {"start_cmd_s": 0.2, "all_running_s": 0.5},
    "memory": {"rss_mib": 20.0},
    "status": {"median_ms": 200.0, "p90_ms": 210.0},
    "restart": {"median_ms": 10.0},
    "replace": {"cmd_s": 0.1, "all_running_again_s": 1.5, "pids_changed": 50,
                "pids_changed_max": 50, "daemon_pid_changed": False},
}
# tenure meets every target against PEER_SESSION
TENURE_SESSION: dict[str, Any] = {
    "start": {"start_cmd_s": 0.2, "all_running_s": 0.3},  # 1.0x, 0.6x
    "memory": {"rss_mib": 30.0},  # 1.5x
    "status": {"median_ms": 60.0, "p90_ms": 70.0},  # 0.3x
    "restart": {"median_ms": 4.0},  # 0.4x
    "replace": {"cmd_s": 0.25, "all_running_again_s": 0.3, "pids_changed": 0,
                "pids_changed_max": 0, "daemon_pid_changed": False},
}


def logs(lines_per_s: float, lost_max: int = 0) -> dict[str, Any]:
    return {"lines": 1000, "captured": 1000, "lost": 0, "lost_max": lost_max,
            "lines_per_s": lines_per_s}


def result(ns: tuple[int, ...] = (50, 200)) -> dict[str, Any]:
    sups = {"tenure": {"version": "1", "logs": logs(8e5),
                       "sessions": {str(n): copy.deepcopy(TENURE_SESSION) for n in ns}},
            "supervisord": {"version": "4", "logs": logs(7e5),
                            "sessions": {str(n): copy.deepcopy(PEER_SESSION) for n in ns}}}
    return {"config": {"ns": list(ns)}, "supervisors": sups}


def with_ratios(res: dict[str, Any]) -> dict[str, Any]:
    """``res`` with its ratios, as bench/suite.py adds them."""
    res["ratios"], res["ratio_best_peer"] = aggregate.ratios(
        res["supervisors"], [str(n) for n in res["config"]["ns"]])
    return res


def tenure(res: dict[str, Any], n: str, scenario: str) -> dict[str, Any]:
    data: dict[str, Any] = res["supervisors"]["tenure"]["sessions"][n][scenario]
    return data


def rows(res: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    """(metric, N) -> the row's cells of the targets against the peers."""
    section = report.targets_section(res)
    section = section[:section.index("### Component targets")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in section
             if ln.startswith("| ") and not ln.startswith("| metric")]
    return {(c[0], c[1]): c for c in cells}


def verdicts(res: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {k: c[-1] for k, c in rows(res).items()}


RSS, LOGS = "supervisor RSS (MiB)", "log lines captured per second (lines/s)"
REPLACE = "control-plane replacement: command returned (s)"


def test_every_target_names_a_ratio_of_the_result_and_has_a_reason_slot() -> None:
    assert [t.key for t in TARGETS] == list(aggregate.RATIOS)
    assert not [t for t in TARGETS if t.component]
    components = {t.key for t in COMPONENT_TARGETS}
    assert set(targets.REASONS) == set(aggregate.RATIOS) | components
    assert len(components) == len(COMPONENT_TARGETS)  # REASONS is keyed by key alone


def test_component_targets_bound_tenure_own_figures_only() -> None:
    assert {t.component for t in COMPONENT_TARGETS} == {"owner", "handoff"}
    for t in COMPONENT_TARGETS:
        assert t.at_most is None and t.at_least is None  # no peer, no ratio
        assert (t.figure_at_most is None) != (t.figure_at_least is None)


def test_figure_at_least_is_shown_and_judged_on_tenure_own_median() -> None:
    t = Target("spawn_per_s", "owner: launches", "launches/s", figure_at_least=1000,
               zero=(("log_lines_lost", "lines lost"),), component="owner")
    assert t.text() == "≥ 1,000 launches/s; 0 lines lost"
    assert t.outcomes(None, 1000.0, [0.0]) == [True, True]
    assert t.verdict(None, 1000.0, [0.0]) == MET
    assert t.verdict(None, 999.0, [0.0]) == BEHIND
    assert t.verdict(None, 5000.0, [1.0]) == BEHIND
    assert t.verdict(None, None, [0.0]) == NOT_MEASURED
    assert t.verdict(None, 10.0, [None]) == BEHIND  # a known miss outweighs


def test_verdict_both_directions_and_unknown_figures() -> None:
    at_most, at_least = Target("k", "l", "s", at_most=2.0), Target("k", "l", "s", at_least=1.0)
    assert at_most.verdict(2.0, None, []) == MET
    assert at_most.verdict(2.01, None, []) == BEHIND
    assert at_least.verdict(1.0, None, []) == MET
    assert at_least.verdict(0.99, None, []) == BEHIND
    assert at_most.verdict(None, 1.0, []) == NOT_MEASURED
    logs_target = Target("k", "l", "s", at_least=1.0, zero=(("lost", "lines lost"),))
    assert logs_target.verdict(1.2, None, [3.0]) == BEHIND
    assert logs_target.verdict(1.2, None, [None]) == NOT_MEASURED
    assert logs_target.verdict(0.5, None, [None]) == BEHIND  # a known miss outweighs


def test_all_met_and_one_row_per_count_logs_once_replace_at_200() -> None:
    got = verdicts(with_ratios(result()))
    assert set(got.values()) == {MET}
    assert (RSS, "50") in got and (RSS, "200") in got
    assert [k for k in got if k[0] == LOGS] == [(LOGS, "any")]
    assert [k for k in got if k[0] == REPLACE] == [(REPLACE, "200")]
    assert not [ln for ln in report.targets_section(with_ratios(result()))
                if ln.startswith("- ")]


def test_row_shows_tenure_the_best_peer_the_ratio_and_the_target() -> None:
    res = result()
    tenure(res, "200", "memory")["rss_mib"] = 50.0  # 2.5x
    res = with_ratios(res)
    assert rows(res)[(RSS, "200")] == [RSS, "200", "50.0", "supervisord", "20.0", "2.50x",
                                       "≤ 2.00x", BEHIND]
    assert verdicts(res)[(RSS, "50")] == MET


def test_logs_need_the_ratio_and_no_line_lost_in_any_repetition() -> None:
    res = result()
    res["supervisors"]["tenure"]["logs"] = logs(6e5)  # 0.86x
    assert verdicts(with_ratios(res))[(LOGS, "any")] == BEHIND
    res["supervisors"]["tenure"]["logs"] = logs(8e5, lost_max=3)
    row = rows(with_ratios(res))[(LOGS, "any")]
    assert row[2:] == ["800,000; 3 lines lost", "supervisord", "700,000", "1.14x",
                       "≥ 1.00x; 0 lines lost", BEHIND]


def test_replace_is_judged_on_tenure_own_time_and_pids_not_the_ratio() -> None:
    res = with_ratios(result())
    row = rows(res)[(REPLACE, "200")]
    assert row[5:] == ["2.50x", "≤ 0.3 s; 0 program pids changed", MET]  # 0.25 s
    tenure(res, "200", "replace")["cmd_s"] = 0.35
    assert verdicts(with_ratios(res))[(REPLACE, "200")] == BEHIND
    tenure(res, "200", "replace").update(cmd_s=0.25, pids_changed_max=1)
    assert verdicts(with_ratios(res))[(REPLACE, "200")] == BEHIND
    tenure(res, "50", "replace")["cmd_s"] = 5.0
    assert (REPLACE, "50") not in verdicts(with_ratios(res))  # judged at 200 only


def test_missing_or_failed_figures_are_not_measured() -> None:
    res = result()
    tenure(res, "50", "status").clear()
    tenure(res, "50", "status")["error"] = "3 of 3 runs failed: timeout"
    row = rows(with_ratios(res))[("status CLI, median (ms)", "50")]
    assert row[2:6] == ["-", "-", "-", "-"] and row[-1] == NOT_MEASURED
    no_ratios = verdicts(result())
    assert no_ratios.pop((REPLACE, "200")) == MET  # judged on tenure's figures alone
    assert set(no_ratios.values()) == {NOT_MEASURED}
    only_50 = verdicts(with_ratios(result(ns=(50,))))
    assert only_50[(REPLACE, "200")] == NOT_MEASURED


def test_reason_is_listed_only_for_a_target_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(targets.REASONS, "ratio_rss", "measured: the owner holds 30 MiB")
    monkeypatch.setitem(targets.REASONS, "ratio_status", "measured: never shown")
    monkeypatch.setitem(targets.REASONS, "ratio_restart", "")   # behind, none recorded
    res = result()
    tenure(res, "50", "memory")["rss_mib"] = 50.0
    tenure(res, "200", "memory")["rss_mib"] = 50.0
    tenure(res, "200", "restart")["median_ms"] = 9.0
    notes = [ln for ln in report.targets_section(with_ratios(res)) if ln.startswith("- ")]
    assert notes == [
        "- supervisor RSS (N = 50, 200): measured: the owner holds 30 MiB",
        "- kill -9 to new pid reported, median (N = 200): behind; no measured reason recorded",
    ]


# One run of each component benchmark that meets every component target.
OWNER_RUN: dict[str, Any] = {"spawn_per_s": 1500.0, "exit_event_p50_us": 900,
                             "exit_event_p99_us": 2500, "log_lines_per_s": 250_000,
                             "log_lines_lost": 0, "owner_rss_mb_1000": 48.0,
                             "exit_status": 0, "wall_s": 30.0}
HANDOFF_RUN: dict[str, Any] = {"apps": 200, "handoffs": 10, "pause_p50_ms": 30.0,
                               "pause_max_ms": 45.0, "upgrade_call_p50_ms": 250.0,
                               "app_restarts": 0, "log_lines_lost": 0, "exit_status": 0,
                               "wall_s": 60.0}


def with_components(owner: list[dict[str, Any]],
                    handoff: list[dict[str, Any]]) -> dict[str, Any]:
    res = with_ratios(result())
    res["components"] = aggregate.merge_components({"owner": owner, "handoff": handoff})
    return res


def component_rows(res: dict[str, Any]) -> dict[str, list[str]]:
    """metric -> the cells of its row in the Component targets table."""
    section = report.targets_section(res)
    table = section[section.index("### Component targets"):]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in table
             if ln.startswith("| ") and not ln.startswith("| metric")]
    return {c[0]: c for c in cells}


SPAWN = "owner: launches per second (launches/s)"
PAUSE = "handoff: control-plane pause, median (ms)"


def test_component_targets_met_show_tenure_figure_and_the_target() -> None:
    res = with_components([OWNER_RUN] * 3, [HANDOFF_RUN] * 3)
    got = component_rows(res)
    assert set(got) == {f"{t.label} ({t.unit})" for t in COMPONENT_TARGETS}
    assert got[SPAWN] == [SPAWN, "1,500", "≥ 1,000 launches/s", MET]
    assert got[PAUSE] == [PAUSE, "30.0; 0 app restarts; 0 lines lost",
                          "≤ 50 ms; 0 app restarts; 0 lines lost", MET]
    assert {c[-1] for c in got.values()} == {MET}
    section = report.targets_section(res)
    assert not [ln for ln in section[section.index("### Component targets"):]
                if ln.startswith("- ")]


def test_component_targets_behind_judge_counts_on_their_worst_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(targets.REASONS, "spawn_per_s", "measured: each launch commits twice")
    monkeypatch.setitem(targets.REASONS, "pause_p50_ms", "")
    slow = {**OWNER_RUN, "spawn_per_s": 800.0}
    restarted = {**HANDOFF_RUN, "app_restarts": 2}
    res = with_components([slow, slow, OWNER_RUN], [HANDOFF_RUN, restarted, HANDOFF_RUN])
    got = component_rows(res)
    assert got[SPAWN][1:] == ["800.0", "≥ 1,000 launches/s", BEHIND]
    assert got[PAUSE][1:3] == ["30.0; 2 app restarts; 0 lines lost",  # median 0, worst 2
                               "≤ 50 ms; 0 app restarts; 0 lines lost"]
    assert got[PAUSE][-1] == BEHIND
    notes = [ln for ln in report.targets_section(res) if ln.startswith("- ")]
    assert notes == ["- owner: launches per second: measured: each launch commits twice",
                     "- handoff: control-plane pause, median: behind; no measured reason "
                     "recorded"]


def test_a_failed_or_missing_component_is_not_measured() -> None:
    res = with_components([OWNER_RUN, {"error": "timed out after 600 s, killed"}],
                          [HANDOFF_RUN])
    got = component_rows(res)
    assert got[SPAWN][1:] == ["failed", "≥ 1,000 launches/s", NOT_MEASURED]
    assert got[PAUSE][-1] == MET
    del res["components"]
    assert {c[1] for c in component_rows(res).values()} == {"not run"}
    assert {c[-1] for c in component_rows(res).values()} == {NOT_MEASURED}
