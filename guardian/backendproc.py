"""Backend generation processes as the guardian sees them: start one from a verified
release, wait for its READY line, watch it, stop it; run a candidate's preflight.

A process the guardian did not start (it survived a guardian restart) is watched through
a pidfd and talked to through its API socket like any other.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.aclient import AsyncClient
from protocol.durable import last_words
from protocol.errors import (
    BackendStartTimeout,
    HandoffFailed,
    IdentityMismatch,
    PreflightFailed,
    PreflightTimeout,
    TenureError,
    error_from_wire,
)
from protocol.identity import start_ticks
from protocol.signame import signal_name

from .release import Release, command

__all__ = ["BackendProcess", "preflight"]

log = logging.getLogger("tenure.guardian")

PREWARM = (
    "import sys\n"   # asyncio without ssl, as protocol.startup does (no release code yet)
    "sys.modules['ssl'] = None\n"
    "import asyncio\n"
    "del sys.modules['ssl']\n"
    # not hashlib: the backend decides where its hashes come from (protocol.startup)
    "import dataclasses, enum, json, logging, sqlite3, tomllib, typing\n"
    "line = sys.stdin.readline()\n"   # the verified release's lib/, or EOF: stop
    "lib = json.loads(line).get('lib') if line.strip() else None\n"
    "if not isinstance(lib, str):\n"
    "    raise SystemExit(0)\n"
    "sys.path.insert(0, lib)\n"
    "import runpy\n"
    "runpy.run_module('backend', run_name='__main__', alter_sys=True)\n"
)
"""What a prewarmed standby runs: the standard library only, until it is told where the
verified release is (then as :func:`guardian.release.command` would)."""

PREFLIGHT_DEADLINE = 30.0
STDERR_TAIL = 4096


@dataclass
class BackendProcess:
    activation: str
    pid: int
    ticks: int | None
    log_path: Path | None = None
    proc: asyncio.subprocess.Process | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    returncode: int | None = None
    expected_exit: bool = False       # set before a deliberate retire or stop
    release: str = ""                 # a standby's release id (verified when it started)
    report: dict[str, Any] | None = None  # a standby's preflight report, if it gave one
    started_s: float = 0.0            # a standby's time to be ready
    interpreter: str = ""             # a prewarmed process's interpreter
    # the coordinator's clock when it was put in control (guardian.coordinator.launch);
    # None for a generation adopted at the guardian's start (how long it ran is unknown)
    up_since: float | None = None
    # guardian.backendwatch: None until probed; then whether its API answered, and
    # since when (wall time) and why not while it does not
    answering: bool | None = None
    unanswered_since: float | None = None
    unanswered_why: str | None = None
    _watch: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, release: Release, home: Path, activation: str, log_dir: Path,
                    timeout: float = 30.0,
                    on_spawn: Callable[[BackendProcess], None] | None = None
                    ) -> BackendProcess:
        """Start and wait for the READY line (``on_spawn`` hears of the process first).
        Raises TenureError: what the backend said, or BackendStartTimeout; the process is
        gone then."""
        log_path = log_dir / f"backend-{activation}.log"
        proc = await _spawn(command(release, "--home", str(home), "--activation", activation),
                            log_path)
        bp = cls(activation, proc.pid, start_ticks(proc.pid), log_path, proc)
        bp._watch = asyncio.create_task(bp._wait_proc())
        if on_spawn is not None:
            on_spawn(bp)
        await bp._expect("ready", timeout)
        return bp

    @classmethod
    async def standby(cls, release: Release, home: Path, log_dir: Path,
                      timeout: float = 30.0, warm: BackendProcess | None = None
                      ) -> BackendProcess:
        """Start a generation that imports everything and then waits, holding nothing,
        for :meth:`activate`: the interpreter's start-up stays out of a handoff's pause.
        ``warm``: a :meth:`prewarm` process to run it in (stopped instead when it cannot
        serve: gone, or another interpreter than the release's). Raises
        BackendStartTimeout or what the backend said (the process is gone then)."""
        t0 = time.monotonic()
        if warm is not None and warm.alive() and \
                os.path.realpath(warm.interpreter) == os.path.realpath(release.interpreter.path):
            bp = warm
            assert bp.proc is not None and bp.proc.stdin is not None
            bp.proc.stdin.write(json.dumps({"lib": str(release.lib)}).encode() + b"\n")
            await bp.proc.stdin.drain()
        else:
            if warm is not None:
                await warm.stop(kill_after=2.0)
            log_path = log_dir / f"backend-standby-{time.time_ns()}.log"
            proc = await _spawn(command(release, "--home", str(home), "--standby"),
                                log_path, stdin=asyncio.subprocess.PIPE)
            bp = cls("", proc.pid, start_ticks(proc.pid), log_path, proc)
            bp._watch = asyncio.create_task(bp._wait_proc())
        bp.release = release.id
        line = await bp._expect("standby", timeout)
        bp.started_s = round(time.monotonic() - t0, 3)
        report = line.get("report")
        bp.report = report if isinstance(report, dict) else None   # older releases: none
        return bp

    @classmethod
    async def prewarm(cls, interpreter: str, home: Path, log_dir: Path) -> BackendProcess:
        """An interpreter for a standby, started before its release is verified: it
        imports the standard library a generation needs (:data:`PREWARM`, the guardian's
        own code) and waits for :meth:`standby` to name the verified release's lib/; no
        code of the release runs before. Its start-up then overlaps the verification."""
        log_path = log_dir / f"backend-standby-{time.time_ns()}.log"
        proc = await _spawn([interpreter, "-I", "-S", "-B", "-c", PREWARM, "--home",
                             str(home), "--standby"], log_path, stdin=asyncio.subprocess.PIPE)
        bp = cls("", proc.pid, start_ticks(proc.pid), log_path, proc, interpreter=interpreter)
        bp._watch = asyncio.create_task(bp._wait_proc())
        return bp

    async def activate(self, activation: str, timeout: float = 30.0) -> None:
        """Hand the standby its activation (its handoff record must exist) and wait for
        READY. Its log is renamed ``backend-<activation>.log`` first, so that whatever
        happens next (an error names the log) it is found by the activation. Raises the
        error the backend reported, or BackendStartTimeout."""
        assert self.proc is not None and self.proc.stdin is not None
        self.activation = activation
        if self.log_path is not None:
            named = self.log_path.with_name(f"backend-{activation}.log")
            os.replace(self.log_path, named)   # it writes on through the same open file
            self.log_path = named
        self.proc.stdin.write(json.dumps({"activation": activation}).encode() + b"\n")
        await self.proc.stdin.drain()
        self.proc.stdin.close()
        await self._expect("ready", timeout)

    async def _expect(self, key: str, timeout: float) -> dict[str, Any]:
        """The process's first line, which must say ``key``. Raises as documented at
        :meth:`start` (the process is gone then)."""
        assert self.proc is not None
        try:
            async with asyncio.timeout(timeout):
                line = await _first_line(self.proc)
        except TimeoutError:
            await self.stop(kill_after=2.0)
            raise BackendStartTimeout(
                f"backend generation (pid {self.pid}) did not report {key} within "
                f"{timeout:.0f} s; it was killed", {"pid": self.pid, "timeout": timeout,
                                                    "waiting_for": key}) from None
        except BaseException:
            await self.stop(kill_after=2.0)
            raise
        if not line.get(key):
            await self.stop(kill_after=2.0)
            if line.get("exited"):
                raise HandoffFailed(*self.ended_why())
            raise error_from_wire(str(line.get("code", "HANDOFF_FAILED")),
                                  str(line.get("msg", f"backend failed ({key})")),
                                  line.get("data") or {})
        return line

    def ended_why(self, what: str = "") -> tuple[str, dict[str, Any]]:
        """Why a backend that ended before its first line did (or, with ``what``, the
        sentence to start with instead): its exit status or signal and the last line of
        its log (a traceback's names the error), and where that log is."""
        said = last_words(self.log_path) if self.log_path is not None else ""
        last = last_line(said)
        status = "" if self.returncode is None else f" ({exit_text(self.returncode)})"
        msg = f"{what or EXITED}{status}" + (f": {last}" if last else "")
        if self.log_path is not None:
            msg += f"; its log: {self.log_path}"
        return msg, {"pid": self.pid, "exit_status": self.returncode,
                     "log": None if self.log_path is None else str(self.log_path)}

    async def gone_error(self, exc: TenureError, grace: float = 1.0) -> TenureError:
        """What to report for ``exc``, an error talking to this generation after its
        READY: when the process has exited (waited for up to ``grace``: a refused
        connect comes before the exit is reaped), HANDOFF_FAILED saying so, with its
        exit status or signal and its log (:meth:`ended_why`); else ``exc`` itself."""
        if not self.exited.is_set():   # a zombie, or reaped with its status on the way
            await _wait(self.exited, grace)
        if self.alive():
            return exc
        return HandoffFailed(*self.ended_why(
            f"backend generation {self.activation} (pid {self.pid}) exited after it "
            "reported ready"))

    @classmethod
    def attach(cls, activation: str, pid: int, ticks: int) -> BackendProcess:
        """Watch a living backend this guardian did not start (a pidfd on it)."""
        bp = cls(activation, pid, ticks)
        bp._watch = asyncio.create_task(bp._wait_pidfd())
        return bp

    async def _wait_proc(self) -> None:
        assert self.proc is not None
        self.returncode = await self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.feed_eof()
        self.exited.set()

    async def _wait_pidfd(self) -> None:
        try:
            fd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            self.exited.set()
            return
        loop = asyncio.get_running_loop()
        gone = asyncio.Event()
        loop.add_reader(fd, gone.set)
        try:
            await gone.wait()
        finally:
            loop.remove_reader(fd)
            os.close(fd)
        self.returncode = _reap(self.pid)
        self.exited.set()

    def alive(self) -> bool:
        return not self.exited.is_set() and start_ticks(self.pid) == self.ticks

    async def stop(self, term_after: float = 0.0, kill_after: float = 10.0) -> None:
        """SIGTERM (after ``term_after`` of grace), then SIGKILL; returns once it is gone."""
        self.expected_exit = True
        if term_after:
            await _wait(self.exited, term_after)
        for sig, grace in ((signal.SIGTERM, kill_after), (signal.SIGKILL, 10.0)):
            if self.exited.is_set():
                break
            if start_ticks(self.pid) == self.ticks:
                try:
                    os.kill(self.pid, sig)
                except ProcessLookupError:
                    pass  # it exited between the check and the signal
            await _wait(self.exited, grace)
        if self._watch is not None:
            await asyncio.gather(self._watch, return_exceptions=True)

    def to_wire(self) -> dict[str, Any]:
        return {"activation": self.activation, "pid": self.pid, "start_ticks": self.ticks,
                "alive": self.alive(), "returncode": self.returncode,
                "answering": self.answering, "unanswered_since": self.unanswered_since,
                "unanswered_why": self.unanswered_why}


def _reap(pid: int) -> int | None:
    """The exit status of an adopted backend that is our child (it was started by the
    guardian this process was before an exec), reaped; None for one that is not."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if done else None


async def _spawn(argv: list[str], log_path: Path,
                 stdin: int = asyncio.subprocess.DEVNULL) -> asyncio.subprocess.Process:
    """Start ``argv`` (a backend: :func:`guardian.release.command`, or a prewarm) in its
    own session, stdout a pipe, stderr appended to ``log_path``."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        return await asyncio.create_subprocess_exec(
            *argv, stdin=stdin, stdout=asyncio.subprocess.PIPE,
            stderr=fd, start_new_session=True)
    finally:
        os.close(fd)


EXITED = "backend exited before it was ready"
LAST_LINE_MAX = 300   # characters of a process's last words in an error message


def exit_text(returncode: int) -> str:
    """``exit status 3``, or ``killed by SIGKILL`` for a negative (signal) status."""
    if returncode >= 0:
        return f"exit status {returncode}"
    return f"killed by {signal_name(-returncode)}"


def last_line(text: str) -> str:
    """The last non-blank line of ``text`` (a traceback's names the error), at most
    LAST_LINE_MAX characters."""
    last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")
    return last if len(last) <= LAST_LINE_MAX else last[:LAST_LINE_MAX - 1] + "…"


async def _wait(ev: asyncio.Event, timeout: float) -> bool:
    try:
        async with asyncio.timeout(timeout):
            await ev.wait()
        return True
    except TimeoutError:
        return False


async def _first_line(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    assert proc.stdout is not None
    raw = await proc.stdout.readline()
    if not raw:
        return {"ready": False, "exited": True, "msg": EXITED}
    try:
        obj = json.loads(raw)
    except ValueError:
        return {"ready": False, "msg": f"unexpected backend output {raw[:200]!r}"}
    return obj if isinstance(obj, dict) else {"ready": False, "msg": "bad READY line"}


async def preflight(release: Release, deadline: float = PREFLIGHT_DEADLINE, *,
                    module: str = "backend", args: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the candidate's ``python -m <module> --preflight *args`` (its backend, or with
    ``module="guardian"`` its guardian). Raises PreflightFailed / PreflightTimeout with
    elapsed time, exit status and the end of stderr."""
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *command(release, "--preflight", *args, module=module),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        start_new_session=True)
    try:
        async with asyncio.timeout(deadline):
            out, err = await proc.communicate()
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise PreflightTimeout(f"preflight did not finish in {deadline:.0f} s",
                               {"elapsed": round(time.monotonic() - t0, 3)}) from None
    rc, stderr = proc.returncode, err[-STDERR_TAIL:].decode(errors="replace")
    data = {"elapsed": round(time.monotonic() - t0, 3), "exit_status": rc, "stderr": stderr}
    if rc != 0:
        said = last_line(stderr)   # the candidate's own words: the error's name
        how = f"was {exit_text(rc)}" if rc is not None and rc < 0 else f"exited {rc}"
        raise PreflightFailed(f"preflight {how}" + (f": {said}" if said else ""), data)
    try:
        report = json.loads(out)
    except ValueError:
        raise PreflightFailed("preflight printed no report", data) from None
    return {**data, "report": report}


async def control(api_sock: str, method: str, params: dict[str, Any] | None = None,
                  timeout: float = 30.0, expect: str | None = None,
                  pid: int | None = None) -> Any:
    """One call to a generation's control API on a fresh connection. With ``pid``, only
    to that process: another one answering on the socket (a generation this guardian
    does not know) gets nothing, and IdentityMismatch is raised."""
    link = ControlLink(api_sock, pid, timeout, expect)
    try:
        return await link.call(method, params)
    finally:
        await link.close()


class ControlLink:
    """Calls to a generation's control API on one connection, made at the first call.
    With ``pid``, only to that process: each connection checks the pid that answers
    (IdentityMismatch, nothing sent) and the first pins its instance, so a connection
    made again after a loss reaches the same process or fails (OwnerChanged). A
    handoff's calls to its incumbent follow each other within milliseconds; one
    connection spares each of them a connect and a handshake inside the pause."""

    def __init__(self, api_sock: str, pid: int | None, timeout: float = 30.0,
                 expect: str | None = None) -> None:
        self.pid = pid
        # allow_group: with a viewer group configured the API socket is 0660 (never wider)
        self.client = AsyncClient(api_sock, timeout=timeout, expect_instance=expect,
                                  pin=pid is not None, name="guardian", allow_group=True)

    async def call(self, method: str, params: dict[str, Any] | None = None,
                   timeout: float | None = None) -> Any:
        c = self.client
        if self.pid is not None and not c.connected:
            welcome = await c.connect()
            if welcome.identity.pid != self.pid:
                await c.close()
                raise IdentityMismatch(
                    f"pid {welcome.identity.pid} answers on {c.path}, not generation "
                    f"pid {self.pid}: {method} was not sent", {"pid": welcome.identity.pid,
                                                               "expected_pid": self.pid})
        return await c.call(method, params or {}, timeout=timeout)

    async def close(self) -> None:
        await self.client.close()
