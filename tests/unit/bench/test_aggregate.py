"""Merging repeated benchmark runs: medians, spreads, failures and tenure's ratios."""

from __future__ import annotations

from typing import Any

import pytest

from bench import aggregate


def test_stats_median_min_max_spread() -> None:
    assert aggregate.stats([142.0, 32.0, 40.0]) == (40.0, 32.0, 142.0, 110.0 / 40.0)
    assert aggregate.stats([5.0]) == (5.0, 5.0, 5.0, 0.0)
    assert aggregate.stats([0, 0]) == (0, 0, 0, 0.0)
    assert aggregate.stats([-1.0, 0.0, 1.0])[3] is None  # median 0, runs differ
    with pytest.raises(ValueError):
        aggregate.stats([])


def test_merge_scenario_keeps_keys_and_adds_stats_beside_them() -> None:
    runs = [{"median_ms": 30.0, "runs": 20, "exit_codes": [0]},
            {"median_ms": 33.0, "runs": 20, "exit_codes": [0, 1]},
            {"median_ms": 60.0, "runs": 20, "exit_codes": [0]}]
    out = aggregate.merge_scenario(runs)
    assert out["median_ms"] == 33.0
    assert (out["median_ms_min"], out["median_ms_max"]) == (30.0, 60.0)
    assert out["median_ms_spread"] == pytest.approx(30.0 / 33.0)
    assert out["runs"] == 20 and out["runs_spread"] == 0.0
    assert out["exit_codes"] == [0, 1]
    assert out["per_run"] == runs
    assert "error" not in out


def test_merge_key_lists_bools_and_missing_values() -> None:
    assert aggregate.merge_key("samples_ms", [[1.0, 2.0], [3.0]]) == {
        "samples_ms": [1.0, 2.0, 3.0]}
    assert aggregate.merge_key("daemon_pid_changed", [True, False, True]) == {
        "daemon_pid_changed": True}
    assert aggregate.merge_key("lines_per_s", [None, None]) == {"lines_per_s": None}
    assert aggregate.merge_key("lines_per_s", [None, 4.0])["lines_per_s"] == 4.0
    assert aggregate.merge_key("lost", [0, 0]) == {
        "lost": 0, "lost_min": 0, "lost_max": 0, "lost_spread": 0.0}
    assert aggregate.merge_key("lost", [0, 3])["lost"] == 1.5


def test_a_failed_run_is_reported_and_the_others_still_count() -> None:
    runs: list[dict[str, Any]] = [{"cmd_s": 1.0}, {"error": "TypeError: boom"},
                                  {"cmd_s": 3.0}]
    out = aggregate.merge_scenario(runs)
    assert out["error"] == "1 of 3 runs failed: TypeError: boom"
    assert out["cmd_s"] == 2.0


def session(start: float, status: float) -> dict[str, Any]:
    return {"start": {"start_cmd_s": start, "all_running_s": start},
            "memory": {"rss_mib": 20.0}, "status": {"median_ms": status},
            "restart": {"median_ms": 10.0}, "replace": {"cmd_s": 1.0},
            "commands": {"start": f"start {start}"},
            "stop": {"error": None, "exit_status": 0, "swept": []}}


def test_merge_session_counts_scenarios_a_run_never_reached_as_failed() -> None:
    broken = {"start": {"error": "ScenarioTimeout: not running"},
              "commands": {"start": "start x", "stop": "stop x"},
              "stop": {"error": None, "exit_status": 1, "swept": [7]}}
    out = aggregate.merge_session([session(1.0, 30.0), broken, session(2.0, 50.0)])
    assert out["start"]["error"].startswith("1 of 3 runs failed: ScenarioTimeout")
    assert out["status"]["error"] == "1 of 3 runs failed: " + aggregate.NOT_RUN["error"]
    assert out["status"]["median_ms"] == 40.0
    assert out["commands"] == {"start": "start 1.0", "stop": "stop x"}
    assert out["stop"] == {"error": None, "exit_statuses": [0, 1, 0], "swept": [7]}
    failed = aggregate.failures({"pm2": {"sessions": {"50": out},
                                         "logs": {"lines_per_s": 1.0}}})
    assert len(failed) == 5 and failed[0].startswith("pm2 n=50 start: 1 of 3")


def test_failures_names_each_failed_scenario() -> None:
    ok = aggregate.merge_session([session(1.0, 30.0)])
    sups = {"tenure": {"sessions": {"50": ok}, "logs": {"lines_per_s": 2.0}},
            "pm2": {"sessions": {"50": ok}, "logs": {"error": "1 of 1 runs failed: x"}}}
    assert aggregate.failures(sups) == ["pm2 logs: 1 of 1 runs failed: x"]


def test_failures_name_a_component_benchmark_that_failed_in_any_run() -> None:
    ok = aggregate.merge_session([session(1.0, 30.0)])
    sups = {"tenure": {"sessions": {"50": ok}, "logs": {"lines_per_s": 2.0}}}
    components = aggregate.merge_components({
        "owner": [{"spawn_per_s": 900.0}, {"spawn_per_s": 1100.0}],
        "handoff": [{"pause_p50_ms": 30.0}, {"error": "exit status 1, no output"}]})
    assert components["owner"]["spawn_per_s"] == 1000.0
    assert components["handoff"]["pause_p50_ms"] == 30.0
    assert aggregate.failures(sups, components) == [
        "tenure component handoff: 1 of 2 runs failed: exit status 1, no output"]
    assert aggregate.failures(sups) == []


def entry(start: float, status: float, logs: float) -> dict[str, Any]:
    sess = aggregate.merge_session([session(start, status)])
    return {"sessions": {"50": sess}, "logs": {"lines_per_s": logs}}


def test_ratios_divide_tenure_by_the_best_peer() -> None:
    sups = {"tenure": entry(1.0, 30.0, 200.0), "supervisord": entry(0.5, 60.0, 400.0),
            "circus": entry(2.0, 40.0, 100.0),
            "pm2": {"sessions": {"50": {"start": {"error": "x"}}}, "logs": {"error": "x"}}}
    values, best = aggregate.ratios(sups, ["50"])
    assert set(values["50"]) == set(aggregate.RATIOS)
    assert values["50"]["ratio_start_all_running"] == 2.0
    assert best["50"]["ratio_start_all_running"] == "supervisord"
    assert values["50"]["ratio_status"] == 0.75 and best["50"]["ratio_status"] == "circus"
    assert values["50"]["ratio_logs"] == 0.5 and best["50"]["ratio_logs"] == "supervisord"
    assert values["50"]["ratio_rss"] == 1.0


def test_ratios_without_tenure_or_without_peers() -> None:
    assert aggregate.ratios({"pm2": entry(1.0, 1.0, 1.0)}, ["50"]) == ({}, {})
    values, best = aggregate.ratios({"tenure": entry(1.0, 1.0, 1.0)}, ["50"])
    assert set(values["50"].values()) == {None} and set(best["50"].values()) == {None}
