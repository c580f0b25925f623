"""The adapter interface every supervisor in the benchmark suite implements.

An adapter drives one supervisor through its documented CLI/API. The driver
(bench/suite.py) owns the timing; adapters only configure, start, query and stop.

Every process an adapter starts carries ``TENURE_BENCH_TOKEN=<token>`` in its
environment (children inherit it), so cleanup can prove a PID is ours before
killing it: :func:`sweep` kills only processes whose environ holds the token.
"""

from __future__ import annotations

import abc
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, final

import psutil

TOKEN_VAR = "TENURE_BENCH_TOKEN"
PROGRAM_VAR = "TENURE_BENCH_PROGRAM"


class ScenarioTimeout(RuntimeError):
    """A bounded wait ran out of time."""


def program_names(n: int) -> list[str]:
    return [f"p{i:03d}" for i in range(n)]


LOG_LINE = "bench-log-line %09d abcdefghijklmnopqrstuvwxyz\n"
LOG_LINE_BYTES = len(LOG_LINE % 0)
# How long a documented stop's processes may take to exit after the command returned.
STOP_SETTLE_S = 5.0


def write_log_writer(workdir: Path, lines: int) -> list[str]:
    """Write a program that prints ``lines`` fixed-width lines as fast as it can; its argv.

    When done it stores its wall-clock start and end (time.time()) in writer.times.
    """
    script = workdir / "writer.py"
    script.write_text(
        "import sys, time\n"
        "t0 = time.time()\n"
        "w = sys.stdout.write\n"
        f"for i in range({lines}):\n"
        f"    w({LOG_LINE!r} % i)\n"
        "sys.stdout.flush()\n"
        f"open({str(workdir / 'writer.times')!r}, 'w').write(f'{{t0}} {{time.time()}}')\n"
    )
    return [sys.executable, "-B", str(script)]


def writer_times(workdir: Path) -> tuple[float, float] | None:
    """(start, end) wall-clock seconds of the last log writer run in ``workdir``."""
    try:
        start, end = (workdir / "writer.times").read_text().split()
        return float(start), float(end)
    except (OSError, ValueError):
        return None


RESTART_POLL_S = 0.0005
"""The pause between two queries while waiting for a killed program's new pid."""


def wait_until(pred: Callable[[], bool], timeout: float, interval: float = 0.005,
               what: str = "condition") -> float:
    """Poll ``pred`` until true; return the seconds waited. Raises ScenarioTimeout."""
    t0 = time.perf_counter()
    deadline = t0 + timeout
    while True:
        try:
            if pred():
                return time.perf_counter() - t0
        except ScenarioTimeout:
            raise
        except Exception:  # the supervisor may be briefly unreachable (restarting)
            pass
        if time.perf_counter() >= deadline:
            raise ScenarioTimeout(f"{what} not reached within {timeout:.0f} s")
        time.sleep(interval)


def run(argv: list[str], env: dict[str, str], timeout: float = 60,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True,
                          timeout=timeout, check=check, stdin=subprocess.DEVNULL)


def timed_run(argv: list[str], env: dict[str, str], timeout: float = 60
              ) -> tuple[float, int]:
    """(seconds, exit status) of one command, output discarded. The end is seen by a
    pidfd the kernel wakes: ``subprocess.run(..., timeout=...)`` polls with sleeps that
    grow to 50 ms, so it rounds a 41 ms command up to 64 ms and a 164 ms one to 214 ms.
    Raises subprocess.TimeoutExpired (the command killed) after ``timeout``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fd = os.pidfd_open(proc.pid)
    try:
        ended = select.select([fd], [], [], timeout)[0]
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
    if not ended:
        proc.kill()
        proc.wait()
        raise subprocess.TimeoutExpired(argv, timeout)
    return elapsed, proc.wait()


def tree_rss(pids: list[int]) -> int:
    """Summed RSS in bytes of ``pids`` (vanished ones count 0)."""
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            pass
    return total


def has_token(proc: psutil.Process, token: str) -> bool:
    try:
        return bool(proc.environ().get(TOKEN_VAR) == token)
    except psutil.Error:
        return False


def running(proc: psutil.Process) -> bool:
    """Whether ``proc`` runs (a zombie nobody reaped has exited)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _described(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())[:120]
    except psutil.Error:
        return "(gone)"


def _carrying(token: str) -> list[psutil.Process]:
    me = os.getpid()
    return [p for p in psutil.process_iter()
            if p.pid != me and has_token(p, token) and running(p)]


def sweep(token: str, grace: float = 2.0, settle: float = 0.0) -> list[int]:
    """Kill every process whose environment carries ``token``; return their PIDs.

    With ``settle``, processes get that long to exit on their own first: a stop
    command may return while its daemon is still on its way out, which is not a
    process left behind. A PID is verified (environ read) right before it is
    signalled, so nothing that this run did not start is ever touched.
    """
    ours = _carrying(token)
    if ours and settle > 0:
        psutil.wait_procs(ours, timeout=settle)
        ours = _carrying(token)
        for proc in ours:
            print(f"    left behind by the stop: pid {proc.pid} {_described(proc)}", flush=True)
    for proc in ours:
        if has_token(proc, token):
            try:
                proc.terminate()
            except psutil.Error:
                pass
    _, alive = psutil.wait_procs(ours, timeout=grace)
    for proc in alive:
        if has_token(proc, token):
            try:
                proc.kill()
            except psutil.Error:
                pass
    psutil.wait_procs(alive, timeout=grace)
    return [p.pid for p in ours]


def daemon_family(daemon_pid: int | None) -> list[int]:
    """The daemon and its descendants that are not benchmark programs."""
    if daemon_pid is None or not psutil.pid_exists(daemon_pid):
        return []
    out = [daemon_pid]
    try:
        kids = psutil.Process(daemon_pid).children(recursive=True)
    except psutil.Error:
        return out
    for kid in kids:
        try:
            if PROGRAM_VAR not in kid.environ():
                out.append(kid.pid)
        except psutil.Error:
            pass
    return out


def forked_not_execd(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run their parent's command line: forked to become a
    program and not yet exec'd (a supervisor that reports a program running once it has
    forked it). Counted then, such a copy of the supervisor's interpreter would add its
    whole resident set to the supervisor's own memory."""
    out = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            parent = proc.parent()
            if parent is not None and proc.cmdline() == parent.cmdline():
                out.append(pid)
        except psutil.Error:
            pass
    return out


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting to be reaped counts as exited)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def remove_tree(path: Path) -> None:
    """Remove a benchmark directory, including read-only ones (installed tenure releases
    are 0555). A path that is already gone is fine."""
    for root, dirs, _files in os.walk(path):
        for d in dirs:
            full = os.path.join(root, d)
            if not os.path.islink(full):
                os.chmod(full, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def read_pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if psutil.pid_exists(pid) else None


class LineHelper:
    """A long-lived helper process answering one JSON line per JSON request line."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def request(self, obj: object, timeout: float = 10.0) -> object:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.close()
            raise ScenarioTimeout(f"helper did not answer within {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            raise ConnectionError("helper exited")
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


def kill9(pid: int, token: str) -> float:
    """SIGKILL ``pid`` after checking it is one of ours; returns ``time.perf_counter()``
    as of right before the signal, so that what is timed from it starts at the kill and
    not at the check (reading /proc/PID/environ, ~0.3 ms)."""
    if not has_token(psutil.Process(pid), token):
        raise RuntimeError(f"pid {pid} is not a benchmark process; refusing to kill it")
    t0 = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    return t0


def checked_argv(key: str, argv: object) -> list[str]:
    """``argv`` itself when it is a non-empty list of strings whose first is non-empty.

    Raises TypeError naming the command otherwise, so an adapter that hands over None
    (or a string, or an empty list) fails at the step that produced it.
    """
    if (not isinstance(argv, list) or not argv or not argv[0]
            or not all(isinstance(a, str) for a in argv)):
        raise TypeError(f"command {key!r}: expected a non-empty list of strings, got {argv!r}")
    return argv


# Supervisor methods that adapters must not override: they own the recording and running
# of commands and the final sweep. Adapters customise them through the hooks named here.
FINAL_METHODS = {
    "record": "shown_env",
    "run_step": "shown_env",
    "status_cli": "status_argv",
    "restart_program": "restart_argv",
    "stop": "stop_supervisor",
}


class Supervisor(abc.ABC):
    """One peer (or tenure) under test. Subclasses set ``name`` and ``version``.

    A subclass that overrides one of :data:`FINAL_METHODS` is rejected with TypeError
    when it is defined: every command an adapter runs goes through :meth:`record`, which
    checks it and returns exactly what :meth:`run_step` then runs.
    """

    name: str = "base"
    version: str = "unknown"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        bad = sorted(m for m in FINAL_METHODS if m in vars(cls))
        if bad:
            hooks = ", ".join(f"{m} -> {FINAL_METHODS[m]}" for m in bad)
            raise TypeError(f"{cls.__name__} overrides Supervisor.{', '.join(bad)}; "
                            f"implement the hook instead ({hooks})")

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.workdir = Path()
        self.names: list[str] = []
        self.commands: dict[str, str] = {}
        self.exit_statuses: dict[str, int] = {}
        self.stop_report: dict[str, Any] = {}

    # -- configuration ------------------------------------------------------------------
    @abc.abstractmethod
    def setup(self, workdir: Path, n_programs: int, program_argv: list[str]) -> None:
        """Write config for ``n_programs`` copies of ``program_argv`` named p000…"""

    @abc.abstractmethod
    def setup_logs(self, workdir: Path, lines: int) -> None:
        """Write config for one program ``log`` running :func:`log_writer_argv`, run once."""

    # -- lifecycle ----------------------------------------------------------------------
    @abc.abstractmethod
    def start(self) -> None:
        """Run the documented start command; return when that command returned."""

    @abc.abstractmethod
    def stop_supervisor(self) -> None:
        """Run the documented stop command if the supervisor is up (through run_step).

        May raise OSError, RuntimeError or SubprocessError; :meth:`stop` reports them.
        """

    @final
    def stop(self) -> None:
        """Stop the supervisor and everything it started. Idempotent; safe after failure.

        Runs :meth:`stop_supervisor`, then kills whatever still carries this run's token.
        ``stop_report`` keeps the stop command's error (or None), its exit status (None
        when it did not run or did not finish) and the swept pids: non-empty means the
        documented stop left processes behind.
        """
        error = None
        self.exit_statuses.pop("stop", None)
        try:
            self.stop_supervisor()
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            swept = sweep(self.token, settle=STOP_SETTLE_S)
        self.stop_report = {"error": error, "exit_status": self.exit_statuses.get("stop"),
                            "swept": swept}

    @abc.abstractmethod
    def replace_control_plane(self) -> None:
        """Run the documented daemon restart/upgrade command; return when it returned."""

    # -- observation --------------------------------------------------------------------
    @abc.abstractmethod
    def all_running(self) -> dict[str, int]:
        """Ask the supervisor (its API, not /proc) which programs run: {name: pid}."""

    def pid_of(self, name: str) -> int | None:
        """The running pid of one program as the supervisor reports it."""
        return self.all_running().get(name)

    @abc.abstractmethod
    def status_argv(self) -> list[str]:
        """argv of the supervisor's CLI status command (run with :meth:`cli_env`)."""

    @final
    def status_cli(self) -> list[str]:
        """The recorded and checked status command: what the status scenario runs."""
        return self.record("status", self.status_argv())

    @abc.abstractmethod
    def restart_argv(self, name: str) -> list[str]:
        """argv of the documented command that restarts the one program ``name``."""

    @final
    def restart_program(self, name: str, timeout: float) -> None:
        """Run the recorded restart command for ``name``; return when it returned."""
        self.run_step("restart", self.restart_argv(name), timeout)

    @abc.abstractmethod
    def own_pids(self) -> list[int]:
        """PIDs of the supervisor's own processes (daemons, helpers), not the programs."""

    @abc.abstractmethod
    def log_files(self) -> list[Path]:
        """Files where the supervisor captured the ``log`` program's stdout."""

    @abc.abstractmethod
    def log_program_exited(self) -> bool:
        """True once the supervisor reports the ``log`` program as exited."""

    def log_captured(self) -> int:
        """Progress of capturing the ``log`` program's output (bytes in its files here;
        an adapter whose logs are not files counts in its own unit)."""
        return sum(p.stat().st_size for p in self.log_files() if p.exists())

    def log_expected(self, lines: int) -> int:
        """``log_captured`` once all ``lines`` are captured."""
        return lines * LOG_LINE_BYTES

    def log_lines(self) -> int:
        """Lines of the ``log`` program captured, counted exactly."""
        total = 0
        for path in self.log_files():
            if path.exists():
                with path.open("rb") as fh:
                    while chunk := fh.read(1 << 20):
                        total += chunk.count(b"\n")
        return total

    # -- commands -----------------------------------------------------------------------
    def cli_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env[TOKEN_VAR] = self.token
        return env

    def shown_env(self) -> dict[str, str]:
        """Variables of :meth:`cli_env` that the report writes before every recorded
        command (``env K=V ... argv``) so that a reader can run it as shown. None here."""
        return {}

    @final
    def record(self, key: str, argv: list[str]) -> list[str]:
        """Check ``argv``, remember it for the report, and return it unchanged.

        Raises TypeError for anything but a non-empty list of strings, and ValueError when
        :meth:`shown_env` disagrees with :meth:`cli_env` (the report would then show a
        command other than the one run).
        """
        argv = checked_argv(key, argv)
        shown = self.shown_env()
        env = self.cli_env()
        wrong = sorted(k for k, v in shown.items() if env.get(k) != v)
        if wrong:
            raise ValueError(f"command {key!r}: shown_env {wrong} differs from cli_env")
        prefix = ["env", *(f"{k}={v}" for k, v in shown.items())] if shown else []
        self.commands[key] = shlex.join([*prefix, *argv])
        return argv

    @final
    def run_step(self, key: str, argv: list[str], timeout: float,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        """Record and run one of the scenario's commands (start, replace, stop, ...).

        Its exit status is kept in ``exit_statuses[key]``. Raises what :meth:`record`
        raises; with ``check`` also CalledProcessError.
        """
        argv = self.record(key, argv)
        proc = run(argv, self.cli_env(), timeout=timeout, check=False)
        self.exit_statuses[key] = proc.returncode
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, argv, proc.stdout, proc.stderr)
        return proc

    # -- measurements shared by all adapters ---------------------------------------------
    def kill_one_and_wait_restart(self, name: str, timeout: float) -> float:
        """kill -9 the program's pid; seconds until the supervisor reports a new pid."""
        old = self.pid_of(name)
        if old is None:
            raise RuntimeError(f"{self.name}: {name} is not running")
        t0 = kill9(old, self.token)

        def restarted() -> bool:
            new = self.pid_of(name)
            return new is not None and new != old and psutil.pid_exists(new)

        # Polled every 0.5 ms: the figure is only as fine as one poll plus the pause,
        # and at 2 ms a faster query made a supervisor's figure worse (it landed on a
        # later poll).
        wait_until(restarted, timeout, interval=RESTART_POLL_S, what=f"{name} restarted")
        return time.perf_counter() - t0

    def sweep(self) -> list[int]:
        return sweep(self.token)
