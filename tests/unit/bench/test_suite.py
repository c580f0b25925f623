"""bench/suite.py: the restart-by-command scenario on a fake supervisor."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from bench import suite
from bench.peers import base

CFG = {"scenario_timeout": 5.0}


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
