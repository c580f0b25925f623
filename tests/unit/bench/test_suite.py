"""bench/suite.py: nested hard bounds, the restart-by-command scenario on a fake, and a
session interrupted by a signal."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bench import suite
from bench.peers import base

CFG = {"scenario_timeout": 5.0}


def test_a_bound_raises_once_its_time_is_up_and_leaves_no_timer() -> None:
    with pytest.raises(suite.HardTimeout, match="scenario exceeded"), suite.bounded(0.05):
        time.sleep(2)
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_an_inner_bound_fires_first_and_the_outer_is_rearmed() -> None:
    t0 = time.monotonic()
    outer = suite.bounded(0.4, "test", suite.DeadlinePassed)
    with pytest.raises(suite.DeadlinePassed, match="test exceeded"), outer:
        with pytest.raises(suite.HardTimeout), suite.bounded(0.05):
            time.sleep(2)
        time.sleep(2)
    assert 0.35 < time.monotonic() - t0 < 1.5


def sleeps() -> dict[str, Any]:
    time.sleep(2)
    return {}


def test_an_outer_deadline_due_first_is_not_a_scenario_error() -> None:
    t0 = time.monotonic()
    with pytest.raises(suite.DeadlinePassed), suite.bounded(0.1, "test", suite.DeadlinePassed):
        suite.run_scenario(sleeps, 10)
    assert time.monotonic() - t0 < 1.5


class Fake(base.Supervisor):
    """Three programs. Once ``victim`` (p002's process) is gone, p002 reports a new pid,
    and so does p000 when ``sloppy``."""

    name = "fake"

    def __init__(self, victim: subprocess.Popen[bytes], sloppy: bool = False) -> None:
        super().__init__()
        self.names = base.program_names(3)
        self.victim, self.sloppy = victim, sloppy

    def restart_argv(self, name: str) -> list[str]:
        return ["fakectl", "restart", name]

    def all_running(self) -> dict[str, int]:
        if self.victim.poll() is None:
            return {"p000": os.getpid(), "p001": os.getppid(), "p002": self.victim.pid}
        return {"p000": os.getppid() if self.sloppy else os.getpid(), "p001": os.getppid(),
                "p002": os.getpid()}


Fake.__abstractmethods__ = frozenset()  # only restart and the queries are exercised


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def fake_command(monkeypatch: pytest.MonkeyPatch, effect: Any) -> None:
    def fake_run(argv: Any, env: dict[str, str], timeout: float = 60,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        effect()
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(base, "run", fake_run)


def ends(proc: subprocess.Popen[bytes]) -> Any:
    def effect() -> None:
        proc.kill()
        proc.wait()
    return effect


def test_restart_by_command_reports_a_new_pid_and_the_others_kept(
        victim: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_command(monkeypatch, ends(victim))
    sup = Fake(victim)
    out = suite.sc_restart_cmd(sup, 3, CFG)
    assert (out["program"], out["pid_changed"], out["others_changed"]) == ("p002", True, 0)
    assert 0 < out["cmd_s"] <= out["new_pid_s"]
    assert sup.commands["restart"] == "fakectl restart p002"


def test_restart_by_command_counts_the_other_programs_it_restarted(
        victim: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_command(monkeypatch, ends(victim))
    assert suite.sc_restart_cmd(Fake(victim, sloppy=True), 3, CFG)["others_changed"] == 1


def test_a_restart_command_that_restarts_nothing_times_out(
        victim: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_command(monkeypatch, lambda: None)
    with pytest.raises(base.ScenarioTimeout, match="p002 restarted by command"):
        suite.sc_restart_cmd(Fake(victim), 3, {"scenario_timeout": 0.2})


def test_the_session_restarts_by_command_between_kill_and_replace() -> None:
    order = [name for name, _ in suite.SESSION]
    assert order.index("restart") < order.index("restart_cmd") < order.index("replace")


class Quiet(base.Supervisor):
    """An adapter that runs nothing and counts its stops."""
    stops = 0

    def setup(self, workdir: Any, n: int, argv: list[str]) -> None:
        pass

    def stop_supervisor(self) -> None:
        Quiet.stops += 1


Quiet.__abstractmethods__ = frozenset()


def test_a_session_interrupted_by_a_signal_ends_with_its_exit_and_its_files_gone(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the signal's handler stopped the adapter and took it off the active
    list; the session's cleanup then failed with ValueError, hiding the exit status and
    leaving the session's directory behind."""
    def interrupted(sup: Any, n: int, cfg: Any) -> dict[str, Any]:
        suite._on_signal(signal.SIGTERM, None)   # as SIGTERM would, mid-scenario
        raise AssertionError("not reached")

    monkeypatch.setitem(suite.ADAPTERS, "quiet", f"{__name__}:Quiet")
    monkeypatch.setattr(suite, "SESSION", [("start", interrupted)])
    Quiet.stops = 0
    with pytest.raises(SystemExit) as ended:
        suite.run_session("quiet", 1, tmp_path, CFG)
    assert ended.value.code == 128 + signal.SIGTERM
    assert Quiet.stops == 1 and suite._ACTIVE == []
    assert list(tmp_path.iterdir()) == []
