"""docs/benchmarks.md text: medians with their spread, flags, commit and load."""

from __future__ import annotations

from typing import Any

import pytest

from bench import aggregate
from bench.peers import report
from bench.peers import targets as targets_mod


def scenario_runs(status_ms: list[float]) -> list[dict[str, Any]]:
    return [{"start": {"start_cmd_s": 1.0, "all_running_s": 1.2},
             "memory": {"rss_mib": 20.0, "processes": 1},
             "status": {"median_ms": ms, "p90_ms": ms, "runs": 20, "exit_codes": [0]},
             "restart": {"median_ms": 10.0, "samples_ms": [10.0]},
             "replace": {"cmd_s": 1.0, "all_running_again_s": 1.1, "pids_changed": 0,
                         "programs": 50, "daemon_pid_changed": False},
             "commands": {"status": "/tmp/tb-abc/x-50/bin status"},
             "stop": {"error": None, "exit_status": 0, "swept": []}} for ms in status_ms]


def logs_runs() -> list[dict[str, Any]]:
    return [{"lines": 1000, "captured": 1000, "lost": lost, "lines_per_s": 5e5,
             "writer_s": 1.0, "all_captured_s": 2.0} for lost in (0, 3, 0)]


def result(tenure_status: list[float], peer_status: list[float]) -> dict[str, Any]:
    k = len(tenure_status)
    sups = {name: {"version": "1", "logs": aggregate.merge_logs(logs_runs()),
                   "sessions": {"50": aggregate.merge_session(scenario_runs(ms))}}
            for name, ms in (("tenure", tenure_status), ("supervisord", peer_status))}
    return {
        "machine": {"cpus": 2, "cpu_model": "cpu", "memory_gib": 8, "os": "Debian",
                    "kernel": "6", "python": "3.11", "node": "v20",
                    "load_avg_at_start": [1.5, 1.0, 0.5], "load_avg_at_end": [2.5, 1.5, 1.0]},
        "commit": {"sha": "0123456789abcdef", "dirty": False},
        "config": {"ns": [50], "status_runs": 20, "restart_repeats": 5, "log_lines": 1000,
                   "repeat": k, "spread_flag": 0.3},
        "repetitions": [{"load_avg_at_start": [1.0 + i, 1.0, 0.5]} for i in range(k)],
        "argv": ["bench/suite.py", "--render"], "total_wall_s": 100.0,
        "log_writer_baseline_lines_per_s": 6e5, "supervisors": sups,
        "installed": {"python": {"supervisor": "4.3.0", "circus": "0.19.0"},
                      "npm": {"pm2": "7.0.4"}},
    }


def row(text: str, label: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {label}"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_cells_show_median_and_spread_and_flag_a_wide_one() -> None:
    text = report.markdown(result([140.0, 32.0, 35.0], [60.0, 62.0, 61.0]), [])
    cells = row(text, "status CLI, median (ms)")
    assert cells[1] == f"35.0 (309%) {report.FLAG}"  # (140 - 32) / 35
    assert cells[2] == "61.0 (3%)"
    assert cells[3] == "0.57x"  # ratio of medians
    assert row(text, "control-plane replacement: program pids changed")[1] == "0"
    # 8 timed figures and 3 log figures per supervisor
    assert f"{report.FLAG} on 2 of 22 figures." in text


def test_header_names_commit_load_before_and_after_and_shared_machine() -> None:
    text = report.markdown(result([30.0, 31.0, 32.0], [60.0, 61.0, 62.0]), [])
    assert "- commit `0123456789ab`\n" in text
    assert "before the run: 1.50, 1.00, 0.50; after it: 2.50, 1.50, 1.00" in text
    assert "start of each repetition: 1.00, 1.00, 0.50; 2.00, 1.00, 0.50; 3.00" in text
    assert "the machine was shared during the run (1-minute load up to 3.00 on 2 CPUs)" in text
    assert "median of 3 repetitions" in text and f"{report.FLAG} on 0 of 22 figures" in text


def test_reproduce_says_what_is_installed_and_how_long_the_run_took() -> None:
    text = report.markdown(result([30.0, 31.0, 32.0], [60.0, 61.0, 62.0]), [])
    para = next(ln for ln in text.splitlines() if ln.startswith("`./dev peers` installs"))
    assert "Node.js and npm from apt" in para and "stops before any run" in para
    assert "supervisor 4.3.0, circus 0.19.0 with pip and pm2 7.0.4 with npm" in para
    assert "This run took 100 s (2 min) on the machine below, 3 repetitions" in para


def test_logs_table_reports_the_worst_loss() -> None:
    text = report.markdown(result([30.0] * 3, [60.0] * 3), [])
    assert row(text, "tenure")[:4] == ["tenure", "1,000", "1,000", "3"]
    assert "| supervisor | lines written | captured | lost (worst of 3) |" in text


def test_single_run_and_old_results_render_without_spread() -> None:
    res = result([30.0], [60.0])
    text = report.markdown(res, [])
    assert row(text, "status CLI, median (ms)")[1:3] == ["30.0", "60.0"]
    assert "single run" in text
    del res["commit"], res["machine"]["load_avg_at_end"], res["repetitions"]
    res["config"].pop("repeat")
    text = report.markdown(res, [])
    assert "- commit not recorded" in text and "after it: not recorded" in text


def test_failed_scenario_shows_its_error_and_no_ratio() -> None:
    res = result([30.0] * 3, [60.0] * 3)
    res["supervisors"]["supervisord"]["sessions"]["50"]["status"] = {"error": "1 of 3 runs"}
    cells = row(report.markdown(res, []), "status CLI, median (ms)")
    assert cells[2:] == ["1 of 3 runs", "-"]


def test_commands_are_shown_with_the_temp_dir_as_w() -> None:
    text = report.markdown(result([30.0], [60.0]), [])
    assert "- status: `` W/bin status ``" in text


def test_targets_follow_the_logs_table_and_say_how_a_ratio_is_computed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(targets_mod.REASONS, "ratio_status", "")   # none recorded
    res = result([30.0] * 3, [60.0] * 3)
    res["ratios"], res["ratio_best_peer"] = aggregate.ratios(res["supervisors"], ["50"])
    text = report.markdown(res, [])
    assert text.index("### Logs") < text.index("## Targets") < text.index("## Plots")
    assert ("A ratio is tenure's median divided by the best peer's median in the same run "
            "at the same program count N") in text
    targets = text[text.index("## Targets"):text.index("## Plots")]
    assert row(targets, "status CLI, median (ms)") == [
        "status CLI, median (ms)", "50", "30.0", "supervisord", "60.0", "0.50x", "≤ 0.35x",
        "behind"]
    assert row(targets, "control-plane replacement")[-1] == "not measured"  # no N = 200
    assert "- status CLI, median (N = 50): behind; no measured reason recorded" in targets


def owner_run(spawn: float, lost: int = 0) -> dict[str, Any]:
    return {"spawn_per_s": spawn, "exit_event_p50_us": 900, "exit_event_p99_us": 2500,
            "log_lines_per_s": 250_000, "log_lines_lost": lost, "owner_rss_mb_1000": 48.0,
            "exit_status": 0, "wall_s": 30.0}


def handoff_run(pause: float) -> dict[str, Any]:
    return {"apps": 200, "handoffs": 10, "pause_p50_ms": pause, "pause_max_ms": 45.0,
            "upgrade_call_p50_ms": 250.0, "app_restarts": 0, "log_lines_lost": 0,
            "exit_status": 0, "wall_s": 60.0}


def with_components(res: dict[str, Any], owner: list[dict[str, Any]],
                    handoff: list[dict[str, Any]]) -> dict[str, Any]:
    res["config"]["components"] = {
        "owner": {"script": "bench/owner.py", "args": ["--spawn", "200", "--idle", "1000"]},
        "handoff": {"script": "bench/handoff.py", "args": ["--apps", "200"]}}
    res["components"] = aggregate.merge_components({"owner": owner, "handoff": handoff})
    return res


def section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end)]


def test_component_tables_show_tenure_medians_worst_counts_and_arguments() -> None:
    res = with_components(result([30.0] * 3, [60.0] * 3),
                          [owner_run(1000.0), owner_run(1500.0, lost=2), owner_run(1200.0)],
                          [handoff_run(p) for p in (30.0, 31.0, 32.0)])
    text = report.markdown(res, [])
    assert text.index("### Logs") < text.index("### Component benchmarks") < text.index(
        "## Targets")
    comp = section(text, "### Component benchmarks", "## Targets")
    assert "**owner** (`bench/owner.py --spawn 200 --idle 1000`)" in comp
    assert "**handoff** (`bench/handoff.py --apps 200`)" in comp
    assert row(comp, "launches per second") == [
        "launches per second, one launch call after another", "launches/s", "1,200 (42%) ⚠"]
    assert row(comp, "log lines lost (worst of 3)") == [
        "log lines lost (worst of 3)", "lines", "2"]
    assert row(comp, "control-plane pause, median") == [
        "control-plane pause, median", "ms", "31.0 (6%)"]
    assert row(comp, "log lines committed per second")[2] == "250,000 (0%)"
    # the component figures count among those with a spread: 22 + 6 owner + 4 handoff
    assert f"{report.FLAG} on 1 of 32 figures." in text
    targets = section(text, "### Component targets", "## Plots")
    assert row(targets, "owner: launches per second")[1:] == [
        "1,200", "≥ 1,000 launches/s", "met"]
    assert row(targets, "owner: log lines committed per second")[1:] == [
        "250,000; 2 lines lost", "≥ 200,000 lines/s; 0 lines lost", "behind"]


def test_a_failed_component_shows_its_error_instead_of_figures() -> None:
    res = with_components(result([30.0], [60.0]), [owner_run(1500.0)],
                          [{"error": "timed out after 600 s, killed", "wall_s": 600.0}])
    comp = section(report.markdown(res, []), "**handoff**", "## Targets")
    assert "error: 1 of 1 runs failed: timed out after 600 s, killed" in comp
    assert "| control-plane pause" not in comp


def test_a_result_without_components_says_they_were_not_run() -> None:
    res = result([30.0] * 3, [60.0] * 3)
    text = report.markdown(res, [])
    comp = section(text, "### Component benchmarks", "## Targets")
    assert "Not run in this result" in comp and "|" not in comp
    targets = section(text, "### Component targets", "## Plots")
    assert row(targets, "handoff: upgrade call, median")[1:] == [
        "not run", "≤ 300 ms", "not measured"]
    assert f"{report.FLAG} on 0 of 22 figures." in text


def test_the_method_says_what_each_component_benchmark_measures() -> None:
    text = report.markdown(result([30.0], [60.0]), [])
    method = section(text, "## What each scenario measures", "## Exact commands")
    assert "- **owner** (`bench/owner.py`)" in method
    assert "- **handoff** (`bench/handoff.py`)" in method
    assert "first refused request to the first answered by the new" in method
