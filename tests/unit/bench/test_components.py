"""bench/components.py, the component runner of bench/suite.py: a benchmark's JSON
result, or an error entry, and nothing of it left running."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from bench import aggregate, components, suite
from bench.peers import base


def script(tmp_path: Path, body: str) -> list[str]:
    """argv running ``body`` as a throwaway benchmark script; PIDS names a file in
    ``tmp_path`` (the script runs in the checkout)."""
    path = tmp_path / "bench_script.py"
    path.write_text("import json, os, signal, subprocess, sys, time\n"
                    f"PIDS = {str(tmp_path / 'pids')!r}\n" + textwrap.dedent(body))
    return [sys.executable, str(path)]


def pids(tmp_path: Path) -> list[int]:
    """The pids a script wrote to ``pids`` (one per line) before it was stopped."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        text = (tmp_path / "pids").read_text() if (tmp_path / "pids").exists() else ""
        if text.endswith("\n"):
            return [int(x) for x in text.split()]
        time.sleep(0.02)
    raise AssertionError("the script wrote no pids")


# starts a child in its group and a daemon in a session of its own (both holding its
# stdout), writes their pids
SPAWNS = """
    child = subprocess.Popen(["sleep", "60"])
    daemon = subprocess.Popen(["sleep", "60"], start_new_session=True)
    with open(PIDS, "w") as f:
        f.write(f"{os.getpid()} {child.pid} {daemon.pid}\\n")
"""


def test_a_good_run_is_its_last_json_line_with_the_wall_time(tmp_path: Path) -> None:
    argv = script(tmp_path, """
        print("spawn via RPC: 1234/s")
        print(json.dumps({"spawn_per_s": 1234.5, "log_lines_lost": 0}))
        print()
    """)
    out = components.run_component(argv, timeout=30)
    assert out["spawn_per_s"] == 1234.5 and out["log_lines_lost"] == 0
    assert out["exit_status"] == 0 and "error" not in out and "left_running" not in out
    assert 0 < out["wall_s"] < 30


def test_it_runs_in_the_checkout_in_a_session_of_its_own(tmp_path: Path) -> None:
    argv = script(tmp_path, """
        print(json.dumps({"cwd": os.getcwd(), "leader": os.getsid(0) == os.getpid()}))
    """)
    out = components.run_component(argv, timeout=30)
    assert out["cwd"] == str(components.ROOT) and out["leader"] is True


def test_a_non_zero_exit_without_json_is_an_error_with_the_last_stderr_line(
        tmp_path: Path) -> None:
    argv = script(tmp_path, """
        print("up: 20 apps ready")
        print("Traceback (most recent call last):", file=sys.stderr)
        print("RuntimeError: handoff 2 ended fenced", file=sys.stderr)
        sys.exit(1)
    """)
    out = components.run_component(argv, timeout=30)
    assert out["error"] == ("exit status 1, no JSON object on its last stdout line; "
                            "stderr: RuntimeError: handoff 2 ended fenced")
    assert set(out) == {"error", "wall_s"}


def test_no_output_or_a_json_list_is_an_error(tmp_path: Path) -> None:
    assert components.run_component(script(tmp_path, "pass\n"), timeout=30)["error"] == (
        "exit status 0, no output")
    out = components.run_component(script(tmp_path, "print('[1, 2]')\n"), timeout=30)
    assert out["error"] == "exit status 0, no JSON object on its last stdout line"


def test_a_non_zero_exit_with_its_json_keeps_the_figures(tmp_path: Path) -> None:
    """bench/handoff.py exits 1 when an app restarted: a result the targets judge."""
    argv = script(tmp_path, """
        print(json.dumps({"pause_p50_ms": 20.0, "app_restarts": 2}))
        sys.exit(1)
    """)
    out = components.run_component(argv, timeout=30)
    assert (out["pause_p50_ms"], out["app_restarts"], out["exit_status"]) == (20.0, 2, 1)
    assert "error" not in out


def test_a_run_past_its_timeout_is_killed_with_all_it_started(tmp_path: Path) -> None:
    argv = script(tmp_path, SPAWNS + """
    print("still measuring", file=sys.stderr, flush=True)
    time.sleep(60)
    """)
    t0 = time.monotonic()
    out = components.run_component(argv, timeout=1.0, grace=1.0)
    assert out["error"] == "timed out after 1 s, killed; stderr: still measuring"
    assert time.monotonic() - t0 < 10
    assert all(base.gone(pid) for pid in pids(tmp_path))


def test_a_run_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    argv = script(tmp_path, """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    """ + SPAWNS + """
    time.sleep(60)
    """)
    t0 = time.monotonic()
    out = components.run_component(argv, timeout=0.5, grace=0.5)
    assert out["error"].startswith("timed out after 0.5 s")
    assert time.monotonic() - t0 < 10
    assert all(base.gone(pid) for pid in pids(tmp_path))


def test_what_a_finished_run_left_running_is_stopped_and_named(tmp_path: Path) -> None:
    argv = script(tmp_path, SPAWNS + """
    print(json.dumps({"spawn_per_s": 1.0}))
    """)
    out = components.run_component(argv, timeout=30)
    _, child, daemon = pids(tmp_path)
    assert out["spawn_per_s"] == 1.0 and "error" not in out
    assert set(out["left_running"]) >= {child, daemon}
    assert base.gone(child) and base.gone(daemon)


def test_run_components_runs_each_configured_script_with_its_arguments(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    echo = tmp_path / "echo.py"
    echo.write_text("import json, sys\nprint(json.dumps({'args': sys.argv[1:]}))\n")
    fails = tmp_path / "fails.py"
    fails.write_text("raise SystemExit('no owner')\n")
    cfg = {"component_timeout": 30.0,
           "components": {"owner": {"script": str(echo), "args": ["--spawn", "5"]},
                          "handoff": {"script": str(fails), "args": []}}}
    raw: dict[str, list[dict[str, Any]]] = {}
    components.run_components(cfg, raw)
    components.run_components(cfg, raw)
    assert [r["args"] for r in raw["owner"]] == [["--spawn", "5"]] * 2
    assert raw["handoff"][0]["error"] == "exit status 1, no output; stderr: no owner"
    printed = capsys.readouterr().out
    assert "  components owner ...\n" in printed
    assert "  components handoff: error: exit status 1" in printed
    merged = aggregate.merge_components(raw)
    assert merged["handoff"]["error"].startswith("2 of 2 runs failed: exit status 1")
    assert aggregate.failures({}, merged) == [
        f"tenure component handoff: {merged['handoff']['error']}"]


def test_full_and_quick_runs_record_the_component_arguments() -> None:
    assert suite.FULL["components"] == {
        "owner": {"script": "bench/owner.py",
                  "args": ["--spawn", "200", "--lines", "1000000", "--idle", "1000"]},
        "handoff": {"script": "bench/handoff.py", "args": ["--apps", "200", "--handoffs", "10"]}}
    assert suite.QUICK["components"] == {
        "owner": {"script": "bench/owner.py",
                  "args": ["--spawn", "50", "--lines", "100000", "--idle", "100"]},
        "handoff": {"script": "bench/handoff.py", "args": ["--apps", "20", "--handoffs", "3"]}}
    for cfg in (suite.FULL, suite.QUICK):
        for spec in cfg["components"].values():  # type: ignore[attr-defined]
            assert (components.ROOT / spec["script"]).is_file()


def test_summary_names_each_component_figure_with_its_benchmark() -> None:
    comps = aggregate.merge_components({
        "owner": [{"spawn_per_s": 1500.0, "log_lines_lost": 0, "wall_s": 9.0,
                   "exit_status": 0}],
        "handoff": [{"error": "timed out after 600 s, killed", "wall_s": 600.0}]})
    got = components.component_summary(comps)
    assert got == {"component_owner_spawn_per_s": 1500.0,
                   "component_owner_log_lines_lost": 0,
                   "component_handoff_error": "1 of 1 runs failed: timed out after 600 s, "
                                              "killed"}
    res = {"supervisors": {"tenure": {"sessions": {}, "logs": {}}}, "components": comps}
    assert suite.summary(res)["tenure"]["component_owner_spawn_per_s"] == 1500.0
    del res["components"]
    assert "component_owner_spawn_per_s" not in suite.summary(res)["tenure"]


def test_a_repetition_runs_the_components_after_the_supervisors_with_tenure_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []

    def session(name: str, n: int, *_: Any) -> dict[str, Any]:
        order.append(f"{name} {n}")
        return {}

    def logs(name: str, *_: Any) -> dict[str, Any]:
        order.append(f"{name} logs")
        return {}

    monkeypatch.setattr(suite, "writer_baseline", lambda *_: 1.0)
    monkeypatch.setattr(suite, "run_session", session)
    monkeypatch.setattr(suite, "run_logs", logs)

    def component(argv: list[str], timeout: float) -> dict[str, Any]:
        order.append(f"component {Path(argv[1]).name} {timeout:g}")
        return {"spawn_per_s": 1.0}

    monkeypatch.setattr(components, "run_component", component)
    cfg = {**suite.QUICK, "ns": [10]}
    names = ["tenure", "pm2"]
    raw: dict[str, dict[str, Any]] = {
        name: {"sessions": {"10": []}, "logs": []} for name in names}
    suite.run_repetition(names, tmp_path, cfg, raw)
    assert order == ["tenure 10", "tenure logs", "pm2 10", "pm2 logs",
                     "component owner.py 600", "component handoff.py 600"]
    assert raw["tenure"]["components"] == {"owner": [{"spawn_per_s": 1.0}],
                                           "handoff": [{"spawn_per_s": 1.0}]}
    order.clear()
    suite.run_repetition(["pm2"], tmp_path, cfg, raw)
    assert order == ["pm2 10", "pm2 logs"]
