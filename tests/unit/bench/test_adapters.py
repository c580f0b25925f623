"""The benchmark adapters record and run exactly the commands they are given.

No processes: ``bench.peers.base.run`` is replaced by a fake that keeps the argv.
"""

from __future__ import annotations

import importlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.peers import base
from bench.suite import ADAPTERS


def adapter(name: str) -> base.Supervisor:
    module, cls = ADAPTERS[name].split(":")
    sup: base.Supervisor = getattr(importlib.import_module(module), cls)()
    return sup


EXIT = {"status": 0}  # what every faked command exits with


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """argv of every command run through run_step, in order; each exits EXIT["status"]."""
    calls: list[list[str]] = []
    monkeypatch.setitem(EXIT, "status", 0)

    def fake_run(argv: Any, env: dict[str, str], timeout: float = 60,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, EXIT["status"], "", "oops")

    monkeypatch.setattr(base, "run", fake_run)
    return calls


def shown(sup: base.Supervisor, argv: list[str]) -> str:
    env = sup.shown_env()
    prefix = ["env", *(f"{k}={v}" for k, v in env.items())] if env else []
    return shlex.join([*prefix, *argv])


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_start_runs_the_command_it_records(name: str, ran: list[list[str]]) -> None:
    """Regression: pm2's record() override returned None, so start ran None."""
    sup = adapter(name)
    sup.start()
    assert len(ran) == 1
    argv = ran[0]
    assert isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
    assert sup.commands["start"].endswith(shlex.join(argv))


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_restart_program_runs_the_command_it_records(name: str, ran: list[list[str]]) -> None:
    sup = adapter(name)
    sup.restart_program("p002", 5)
    assert ran == [sup.restart_argv("p002")]
    assert "p002" in ran[0] or "bench/p002/0" in ran[0]
    assert sup.commands["restart"] == shown(sup, ran[0])
    assert sup.exit_statuses["restart"] == 0


def test_run_step_keeps_the_exit_status_and_raises_with_check(ran: list[list[str]]) -> None:
    sup = adapter("supervisord")
    EXIT["status"] = 3
    assert sup.run_step("stop", ["supervisorctl", "shutdown"], 1, check=False).returncode == 3
    assert sup.exit_statuses == {"stop": 3}
    with pytest.raises(subprocess.CalledProcessError) as info:
        sup.run_step("start", ["supervisord"], 1)
    assert (info.value.returncode, info.value.stderr) == (3, "oops")
    assert sup.exit_statuses == {"stop": 3, "start": 3}


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_status_cli_is_a_recorded_argv(name: str) -> None:
    sup = adapter(name)
    argv = sup.status_cli()
    assert isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
    assert argv == sup.status_argv()
    assert sup.commands["status"] == shown(sup, argv)


def test_pm2_report_shows_its_home_and_runs_the_bare_cli(ran: list[list[str]]) -> None:
    sup = adapter("pm2")
    sup.workdir = Path("/tmp/tb-x/pm2-3")
    sup.run_step("replace", ["pm2", "update"], 1)
    assert ran == [["pm2", "update"]]
    assert sup.commands["replace"] == (
        "env PM2_HOME=/tmp/tb-x/pm2-3/pm2home PM2_NO_INTERACTION=true pm2 update")
    assert sup.cli_env()["PM2_HOME"] == "/tmp/tb-x/pm2-3/pm2home"


@pytest.mark.parametrize("method", sorted(base.FINAL_METHODS))
def test_an_adapter_cannot_override_the_final_methods(method: str) -> None:
    def override(self: base.Supervisor, *args: object, **kwargs: object) -> None:
        return None

    with pytest.raises(TypeError, match=f"overrides Supervisor.{method}"):
        type("Broken", (base.Supervisor,), {method: override})


@pytest.mark.parametrize("bad", [None, "pm2 status", [], [""], ["pm2", 3], ("pm2",)])
def test_run_step_refuses_what_is_not_an_argv(bad: Any, ran: list[list[str]]) -> None:
    sup = adapter("supervisord")
    with pytest.raises(TypeError, match="'start'"):
        sup.run_step("start", bad, 1)
    assert ran == []
    assert "start" not in sup.commands


def test_record_refuses_a_shown_env_that_is_not_the_run_env() -> None:
    class Lying(base.Supervisor):
        def shown_env(self) -> dict[str, str]:
            return {"PM2_HOME": "/elsewhere"}

    Lying.__abstractmethods__ = frozenset()  # only the command methods are exercised
    with pytest.raises(ValueError, match="PM2_HOME"):
        Lying().record("start", ["true"])


def test_stop_reports_what_the_sweep_found(monkeypatch: pytest.MonkeyPatch) -> None:
    sup = adapter("supervisord")
    monkeypatch.setattr(base, "sweep", lambda token, **kw: [4242])
    monkeypatch.setattr(type(sup), "stop_supervisor", lambda self: None)
    sup.stop()
    assert sup.stop_report == {"error": None, "exit_status": None, "swept": [4242]}


def test_stop_reports_the_exit_status_of_the_stop_command(
        monkeypatch: pytest.MonkeyPatch, ran: list[list[str]]) -> None:
    """A stop command that exits non-zero is seen, and the sweep still runs."""
    sup = adapter("supervisord")
    swept: list[str] = []
    monkeypatch.setattr(base, "sweep", lambda token, **kw: swept.append(token) or [])
    monkeypatch.setattr(type(sup), "stop_supervisor",
                        lambda self: self.run_step("stop", ["shutdown"], 1, check=False))
    EXIT["status"] = 2
    sup.stop()
    assert sup.stop_report == {"error": None, "exit_status": 2, "swept": []}
    assert swept == [sup.token]
    monkeypatch.setattr(type(sup), "stop_supervisor", lambda self: None)
    sup.stop()  # this time no stop command ran: no status, not the previous one
    assert sup.stop_report["exit_status"] is None


def test_stop_sweeps_and_reports_when_the_stop_command_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sup = adapter("supervisord")
    swept: list[str] = []
    monkeypatch.setattr(base, "sweep", lambda token, **kw: swept.append(token) or [])

    def broken(self: base.Supervisor) -> None:
        raise subprocess.TimeoutExpired(["supervisorctl"], 60)

    monkeypatch.setattr(type(sup), "stop_supervisor", broken)
    sup.stop()
    assert swept == [sup.token]
    assert sup.stop_report["error"].startswith("TimeoutExpired")


def test_timed_run_gives_the_exit_status_and_kills_on_timeout() -> None:
    import os
    env = dict(os.environ)
    elapsed, code = base.timed_run(["sh", "-c", "exit 3"], env)
    assert code == 3 and elapsed > 0
    assert base.timed_run(["true"], env)[1] == 0
    with pytest.raises(subprocess.TimeoutExpired):
        base.timed_run(["sleep", "30"], env, timeout=0.05)


def test_a_forked_copy_not_yet_execd_is_told_from_a_program():
    """bench.peers.base.forked_not_execd, with real processes: a child that forked and
    did not exec runs its parent's command line; one that exec'd does not."""
    script = ("import os, sys, time\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    time.sleep(60); os._exit(0)\n"
              "kid = os.fork()\n"
              "if kid == 0:\n"
              "    os.execvp('sleep', ['sleep', '60'])\n"
              "print(pid, kid, flush=True)\n"
              "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        assert parent.stdout is not None
        copy, program = (int(x) for x in parent.stdout.readline().split())
        deadline = time.monotonic() + 10
        while base.forked_not_execd([copy, program]) != [copy]:
            assert time.monotonic() < deadline, base.forked_not_execd([copy, program])
            time.sleep(0.01)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_the_installed_code_is_compiled_where_its_bytecode_is_stale(tmp_path, monkeypatch):
    """bench.tenure_adapter.byte_compile: a module edited after it was compiled gets its
    bytecode again, so no `tenure` command of the run compiles it (its time would count
    as tenure's wherever PYTHONDONTWRITEBYTECODE is set)."""
    from importlib.util import cache_from_source

    from bench.tenure_adapter import byte_compile
    pkg = tmp_path / "tbpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    mod = pkg / "m.py"
    mod.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    byte_compile(("tbpkg",))
    pyc = Path(cache_from_source(str(mod)))
    assert pyc.is_file()
    first = pyc.read_bytes()
    mod.write_text("X = 2  # edited\n")
    os.utime(mod, ns=(time.time_ns() + 2_000_000_000,) * 2)   # newer than the bytecode
    byte_compile(("tbpkg",))
    assert pyc.read_bytes() != first
    monkeypatch.delitem(sys.modules, "tbpkg", raising=False)


def test_the_tenure_log_app_keeps_every_line_of_the_run(monkeypatch, tmp_path):
    """Regression: the logs scenario ran under the journal's default 64 MiB budget, which
    holds ~800k of the writer's million lines (each record costs its data and ~32 bytes
    more), so the oldest were pruned and counted as lost. The peers keep everything
    (supervisord: maxbytes=0); so must tenure's config."""
    from backend.config import load_config
    from bench.peers.base import LOG_LINE
    from bench.tenure_adapter import Tenure
    from owner.journaldb import record_cost

    def prepare(self: Tenure, workdir: Path) -> None:
        self.workdir, self.home = workdir, workdir / "h"
    monkeypatch.setattr(Tenure, "_prepare_home", prepare)
    sup = Tenure()
    lines = 1_000_000
    sup.setup_logs(tmp_path, lines)
    (app,) = load_config(sup.config).apps()
    kept = (len(LOG_LINE % (lines - 1)) - 1 + record_cost("bench", app.name)) * lines
    assert app.log_retention is not None and app.log_retention >= kept
