"""Readiness and health probes, and the runners that repeat them.

Every probe is a coroutine returning a :class:`Verdict` (true when the target passed,
and in words what came back: ``connection refused``, ``status 500``, ``exit 1: db down``)
and is bounded by a timeout: it never hangs and never raises for an unhealthy target
(refused, reset, garbage, silence all fail). Probes only read; they never change the app.
:func:`describe` says in words what a configured probe looks at (``tcp 127.0.0.1:8765``).

- :func:`tcp_listening`: a process of the app listens on the port. Uses netlink sock_diag
  (pyroute2 ``DiagSocket``, IPv4 and IPv6 LISTEN sockets) and maps each socket inode to the
  app's processes. Those come from the owner (``launch.sockets``, capability
  ``socketInodes`` 1: it knows every process of the launch, descendants that left the
  group included, and may read the fds of apps running as other users); with an older
  owner, through ``/proc/PID/fd`` of the process group, where an app running as another
  user (system scope) keeps its fds from the backend: a listener is then the app's when
  its socket belongs to the uid that process runs as. Falls back to a TCP connect to
  ``host:port`` when sock_diag is unavailable (the fallback cannot tell whose listener
  answered). :func:`tcp_serving`, the tcp health check, is the same test (same words)
  followed by a connect: the app's listener must also accept.
- :func:`http_ok`: raw HTTP/1.1 GET; 2xx/3xx is ok. ``http://`` only: https would need
  certificate policy that a local probe has no use for; a bad URL raises ``ValueError``.
- :func:`exec_ok`: a command in its own session; its own exit 0 is ok, as soon as it
  exits (a background child holding its output does not delay the verdict). Then,
  whatever the verdict, what is left of its process group is killed and it is reaped.
- ``notify`` readiness has no probe: the owner turns READY=1 into an observation event
  and the reconciler feeds ``instance.Ready`` for the matching launch. ``delay`` is a
  timer of the instance machine, ``none`` is ready at launch.

:class:`ProbeRunner` repeats a probe until it succeeds or the readiness timeout passes
(one attempt may take what is left of it);
:class:`HealthRunner` runs a check every interval after a grace period and reports each
result. Both own exactly one task and ``aclose()`` cancels and awaits it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from msgspec import Struct

from protocol import procfs, procholders
from protocol.signame import signal_name

from .model import App, Health, HealthKind, Readiness, ReadyKind
from .probe_exec import run_check

__all__ = [
    "HealthRunner",
    "Held",
    "Probe",
    "ProbeRunner",
    "TcpMethod",
    "Verdict",
    "checks_view",
    "describe",
    "exec_ok",
    "group_of",
    "health_probe",
    "hidden_owners",
    "http_ok",
    "listening_inodes",
    "process_group_members",
    "readiness_probe",
    "socket_inodes",
    "tcp_connect",
    "tcp_listening",
    "tcp_serving",
]

log = logging.getLogger(__name__)

TCP_LISTEN = 10  # TCP_LISTEN in the kernel's tcp_states.h; sock_diag takes 1 << state


class Verdict(Struct, frozen=True):
    """A probe's answer: ``ok``, and what came back in a few lower-case words."""

    ok: bool
    said: str

    def __bool__(self) -> bool:
        return self.ok


Probe = Callable[[], Awaitable[Verdict | bool]]
"""A probe; a plain bool (a test's, say) is taken as passed or failed without words."""


def _oserror(exc: OSError) -> str:
    """``connection refused``: the OS error in lower-case words, no repr."""
    if exc.errno is not None:
        return os.strerror(exc.errno).lower()
    return str(exc).lower() or type(exc).__name__.lower()


def _secs(t: float) -> str:
    """``2s``, ``0.25s``, ``16s``: at most three significant digits and no exponent, so a
    bound computed from a deadline (15.99871 s left) reads as the ``16s`` it is."""
    if t >= 100:
        return f"{t:.0f}s"
    return f"{float(f'{t:.3g}'):g}s"


class TcpMethod(StrEnum):
    AUTO = "auto"        # sock_diag, or connect when sock_diag is unavailable
    DIAG = "diag"        # sock_diag only (unavailable -> False)
    CONNECT = "connect"  # connect to host:port only


# ---- tcp --------------------------------------------------------------------------------


def listening_inodes(port: int) -> dict[int, int]:
    """Inode → owning uid of the TCP LISTEN sockets on ``port`` (IPv4 and IPv6), via
    sock_diag. Raises ImportError when pyroute2 is missing and OSError for any netlink
    failure (pyroute2's NetlinkError is not an OSError, so it is wrapped)."""
    from pyroute2 import DiagSocket

    inodes: dict[int, int] = {}
    try:
        with DiagSocket() as ds:
            ds.bind()
            for family in (socket.AF_INET, socket.AF_INET6):
                for msg in ds.get_sock_stats(family=family, states=1 << TCP_LISTEN):
                    if msg["idiag_sport"] == port:
                        inodes[int(msg["idiag_inode"])] = int(msg["idiag_uid"])
    except OSError:
        raise
    except Exception as exc:  # NetlinkError, or a reply pyroute2 could not parse
        raise OSError(f"sock_diag failed: {exc!r}") from exc
    return inodes


def hidden_owners(pids: Iterable[int]) -> set[int]:
    """The uids of those ``pids`` whose ``/proc/PID/fd`` we may not read (an app running
    as another user). Never raises OSError."""
    uids: set[int] = set()
    for pid in pids:
        try:
            os.listdir(f"/proc/{pid}/fd")
        except PermissionError:
            with contextlib.suppress(OSError):
                uids.add(os.stat(f"/proc/{pid}").st_uid)
        except OSError:
            continue
    return uids


def socket_inodes(pids: Iterable[int]) -> set[int]:
    """Socket inodes held open by ``pids`` that this process may read (protocol.procholders).
    Never raises OSError."""
    return procholders.socket_inodes(pids)


def process_group_members(pgid: int) -> set[int]:
    """PIDs whose process group is ``pgid``, zombies included (one /proc scan). Never
    raises OSError: vanished processes are skipped."""
    return set(procfs.group_members(pgid, include_zombies=True))


def group_of(pid: int | None) -> Callable[[], set[int]]:
    """The ``pids`` of a tcp probe for an app whose process ``pid`` leads its group:
    :func:`process_group_members`, read each time a probe needs them (none without a
    process). Never raises OSError."""
    return lambda: process_group_members(pid) if pid else set()


def _diag_owned(port: int, pids: set[int], held: set[int] | None = None) -> Verdict:
    """``held``: the socket inodes the owner says the app holds; without them the app's
    are read from /proc/PID/fd of ``pids`` (only those this process may read)."""
    listening = listening_inodes(port)
    if not listening:
        return Verdict(False, "nothing listens on the port")
    if held is not None:
        return Verdict(True, "listening") if set(listening) & held else Verdict(
            False, "another process listens on the port, not the app")
    if set(listening) & socket_inodes(pids):
        return Verdict(True, "listening")
    # another user's app: a listener on the port owned by the uid its process runs as
    if hidden_owners(pids) & set(listening.values()):
        return Verdict(True, "listening")
    return Verdict(False, "another process listens on the port, not the app")


async def _close(writer: asyncio.StreamWriter) -> None:
    """Close and wait (briefly) until the socket is really closed, so no fd outlives us."""
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(1.0):
            await writer.wait_closed()


async def tcp_connect(host: str, port: int, timeout: float) -> Verdict:
    """Passes when a TCP connection to host:port is accepted within ``timeout``."""
    try:
        async with asyncio.timeout(timeout):
            _reader, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return Verdict(False, f"no answer within {_secs(timeout)}")
    except OSError as exc:
        return Verdict(False, _oserror(exc))
    await _close(writer)
    return Verdict(True, "connected")


Held = Callable[[], Awaitable["set[int] | None"]]
"""The socket inodes the owner says the app's processes hold (``launch.sockets``), or
None when it cannot say (an older owner, the launch gone, the owner out of reach)."""


Pids = Iterable[int] | Callable[[], set[int]]
"""The app's process group members, or a callable returning them (called only when the
owner cannot say which sockets the app holds)."""


async def _owned_listener(port: int, pids: Pids, timeout: float, method: TcpMethod,
                          held: Held | None) -> Verdict | None:
    """Whether the app has a TCP LISTEN socket on ``port`` (sock_diag, see
    :func:`tcp_listening`), or None when sock_diag is unavailable and ``method`` is AUTO
    (the caller may connect instead). Bounded by ``timeout``; never raises for an
    unavailable kernel interface."""
    try:
        async with asyncio.timeout(timeout):
            inodes = None if held is None else await held()
            members: set[int] = set()
            if inodes is None:
                members = set(pids() if callable(pids) else pids)
            # sock_diag is a few ms, but the /proc scan grows with fds: keep the loop free.
            return await asyncio.to_thread(_diag_owned, port, members, inodes)
    except TimeoutError:
        return Verdict(False, f"sock_diag gave no answer within {_secs(timeout)}")
    except (ImportError, OSError) as exc:
        if method is TcpMethod.DIAG:
            return Verdict(False, f"sock_diag unavailable: {exc}")
        log.debug("sock_diag unavailable (%s); using a connect probe", exc)
        return None


async def tcp_listening(port: int, pids: Pids, *, host: str = "127.0.0.1",
                        timeout: float = 2.0, method: TcpMethod = TcpMethod.AUTO,
                        held: Held | None = None) -> Verdict:
    """Passes when the app has a TCP LISTEN socket on ``port``: one whose inode the owner
    attributes to it (``held``), else one held by ``pids`` (the app's process group, read
    from /proc; a callable is called only when needed). With AUTO, an unavailable
    sock_diag falls back to :func:`tcp_connect`, which cannot attribute the listener to
    the app. Bounded by ``timeout``; never raises for an unavailable kernel interface."""
    if method is not TcpMethod.CONNECT:
        owned = await _owned_listener(port, pids, timeout, method, held)
        if owned is not None:
            return owned
    return await tcp_connect(host, port, timeout)


async def tcp_serving(port: int, pids: Pids, *, host: str = "127.0.0.1",
                      timeout: float = 2.0, method: TcpMethod = TcpMethod.AUTO,
                      held: Held | None = None) -> Verdict:
    """The tcp health check: the listener on ``port`` is the app's (the very test of
    :func:`tcp_listening`, failing with its words) and accepts a connection to
    ``host:port`` (a listener whose queue is full is unhealthy too). Without sock_diag
    under AUTO only the connect is left. Both steps together are bounded by ``timeout``;
    never raises for an unhealthy target or an unavailable kernel interface."""
    try:
        async with asyncio.timeout(timeout):
            if method is not TcpMethod.CONNECT:
                owned = await _owned_listener(port, pids, timeout, method, held)
                if owned is not None and not owned:
                    return owned
            return await tcp_connect(host, port, timeout)
    except TimeoutError:
        return Verdict(False, f"no answer within {_secs(timeout)}")


# ---- http -------------------------------------------------------------------------------


def _split_http_url(url: str) -> tuple[str, int, str, str]:
    """(host, port, path?query, Host header). Raises ValueError for a non-http URL."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"probe URL must be http://HOST[:PORT]/PATH, not {url!r}")
    port = parts.port or 80  # .port raises ValueError for a bad port itself
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.hostname, port, path, parts.netloc.rpartition("@")[2]


async def http_ok(url: str, timeout: float) -> Verdict:
    """GET ``url`` over HTTP/1.1; passes for a 2xx or 3xx status within ``timeout``.
    Raises ValueError for a URL that is not ``http://``; anything the server does (refuse,
    reset, garbage, silence) fails, saying which."""
    host, port, path, host_header = _split_http_url(url)
    request = (f"GET {path} HTTP/1.1\r\nHost: {host_header}\r\n"
               "User-Agent: tenure-probe\r\nAccept: */*\r\nConnection: close\r\n\r\n")
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request.encode("ascii", "strict"))
            await writer.drain()
            status_line = await reader.readline()
    except TimeoutError:
        return Verdict(False, f"no answer within {_secs(timeout)}")
    except OSError as exc:
        return Verdict(False, _oserror(exc))
    except (UnicodeError, ValueError):
        return Verdict(False, "the answer is not http")
    finally:
        if writer is not None:
            await _close(writer)
    parts = status_line.split(None, 2)
    if not status_line:
        return Verdict(False, "closed without an answer")
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        return Verdict(False, "the answer is not http")
    status = int(parts[1])
    return Verdict(200 <= status < 400, f"status {status}")


# ---- exec -------------------------------------------------------------------------------


def _ended(code: int, line: str) -> str:
    how = f"exit {code}" if code >= 0 else f"killed by {signal_name(-code)}"
    return f"{how}: {line}" if line else how


async def exec_ok(argv: tuple[str, ...] | list[str], timeout: float,
                  env: Mapping[str, str] | None = None, cwd: str | None = None) -> Verdict:
    """Run ``argv`` in a new session (:func:`backend.probe_exec.run_check`); passes when
    the command itself exits 0 within ``timeout``, saying its exit status and the first
    line of its output (stdout and stderr together), as soon as it exits. Whatever the
    verdict, on timeout or cancellation too, what is left of its process group is
    SIGKILLed and the command reaped before this returns (or re-raises CancelledError).
    A command that cannot be started fails, saying why."""
    try:
        code, line = await run_check(argv, timeout, env=env, cwd=cwd)
    except TimeoutError:
        return Verdict(False, f"no exit within {_secs(timeout)}")
    except OSError as exc:
        log.debug("exec probe %s could not start: %s", argv[:1], exc)
        return Verdict(False, f"cannot start: {_oserror(exc)}")
    return Verdict(code == 0, _ended(code, line))


# ---- config -> probe --------------------------------------------------------------------


def _port(base: int | None, step: int, index: int) -> int:
    if base is None:
        raise ValueError("a tcp probe needs a port")
    return base + index * step


def readiness_probe(ready: Readiness, index: int, pids: Callable[[], set[int]], *,
                    env: Mapping[str, str] | None = None, cwd: str | None = None,
                    method: TcpMethod = TcpMethod.AUTO, held: Held | None = None
                    ) -> Probe | None:
    """The probe for ``ready`` of instance ``index``, or None for none/notify/delay
    (no probe: see the module docstring). ``pids`` returns the app's current process
    group members, ``held`` the owner's word on its sockets (:data:`Held`). One attempt
    is bounded only by ``ready.timeout``, the whole readiness deadline: the
    :class:`ProbeRunner` cuts it at what is left of that deadline, so a slow check passes
    as long as it answers in time. Raises ValueError for a tcp readiness without a port
    or a bad URL."""
    if ready.kind is ReadyKind.TCP:
        port = _port(ready.port, ready.port_step, index)
        return lambda: tcp_listening(port, pids, host=ready.host,
                                     timeout=ready.timeout, method=method, held=held)
    if ready.kind is ReadyKind.HTTP:
        url = ready.url or ""
        _split_http_url(url)
        return lambda: http_ok(url, ready.timeout)
    if ready.kind is ReadyKind.EXEC:
        return lambda: exec_ok(ready.command, ready.timeout, env, cwd)
    return None


def health_probe(health: Health, index: int, pids: Callable[[], set[int]], *,
                 env: Mapping[str, str] | None = None, cwd: str | None = None,
                 method: TcpMethod = TcpMethod.AUTO, held: Held | None = None) -> Probe:
    """The check for ``health`` of instance ``index``, bounded by ``health.timeout``.
    ``pids`` and ``held`` as for :func:`readiness_probe`: a tcp health check passes only
    for the app's own listener, as readiness does, and only while it accepts a
    connection (:func:`tcp_serving`). Raises ValueError for a tcp check without a port
    or a bad URL."""
    if health.kind is HealthKind.TCP:
        port = _port(health.port, health.port_step, index)
        return lambda: tcp_serving(port, pids, host=health.host, timeout=health.timeout,
                                   method=method, held=held)
    if health.kind is HealthKind.HTTP:
        url = health.url or ""
        _split_http_url(url)
        return lambda: http_ok(url, health.timeout)
    return lambda: exec_ok(health.command, health.timeout, env, cwd)


def describe(check: Readiness | Health, index: int) -> str:
    """What the probe of ``check`` (instance ``index``) looks at, in words:
    ``tcp 127.0.0.1:8765``, ``GET http://127.0.0.1:8765/health``, ``exec ./check --db``.
    Empty for readiness kinds without a probe."""
    kind = str(check.kind)
    if kind == "tcp":
        port = "?" if check.port is None else str(check.port + index * check.port_step)
        return f"tcp {check.host}:{port}"
    if kind == "http":
        return f"GET {check.url}"
    if kind == "exec":
        import shlex
        text = shlex.join(check.command)
        return f"exec {text if len(text) <= 120 else text[:119] + '…'}"
    return ""


def checks_view(app: App, index: int) -> dict[str, Any]:
    """``readiness`` (what its probe looks at, "" without one) and ``health`` (null, or
    the check with its timing) of an app's instance ``index``, for ``tenure inspect``."""
    h = app.health
    return {"readiness": describe(app.ready, index),
            "health": None if h is None else {
                "check": describe(h, index), "interval": h.interval, "timeout": h.timeout,
                "failures": h.failures, "grace": h.grace}}


# ---- runners ----------------------------------------------------------------------------


async def _attempt(probe: Probe, timeout: float) -> Verdict:
    """One bounded probe run; an exception from a probe is a failure, not a crash."""
    try:
        async with asyncio.timeout(max(timeout, 0.0)):
            said = await probe()
    except TimeoutError:
        return Verdict(False, f"no answer within {_secs(max(timeout, 0.0))}")
    except Exception as exc:
        log.exception("probe raised; counted as a failure")
        return Verdict(False, f"probe error: {type(exc).__name__}")
    if isinstance(said, Verdict):
        return said
    return Verdict(bool(said), "passed" if said else "failed")


class _OneTask:
    """Holds at most one task; ``aclose`` cancels and awaits it (no leaked task)."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def _spawn(self, factory: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        if self.running:
            raise RuntimeError(f"{name} already running")
        self._task = asyncio.get_running_loop().create_task(factory(), name=name)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def aclose(self) -> None:
        """Cancel the task and wait until it has finished. Never raises CancelledError
        of the task itself (it may raise if the caller is cancelled)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class ProbeRunner(_OneTask):
    """Runs ``probe`` every ``interval`` until it succeeds or ``timeout`` passes, then
    calls ``on_result(True)`` (ready) or ``on_result(False)`` (timed out) exactly once —
    unless cancelled first, in which case it calls nothing. ``on_attempt`` (optional)
    gets the verdict of every attempt, first. An attempt may take what is left of
    ``timeout`` (a slow check still passes in time), or at most ``attempt_timeout`` when
    that is given; an attempt that fails at once is repeated after ``interval``."""

    def __init__(self, probe: Probe, *, interval: float, timeout: float,
                 attempt_timeout: float | None = None,
                 on_attempt: Callable[[Verdict], None] | None = None) -> None:
        super().__init__()
        self.probe, self.interval, self.timeout = probe, interval, timeout
        self.attempt_timeout = attempt_timeout
        self.on_attempt = on_attempt or (lambda verdict: None)

    async def run(self) -> bool:
        """True once the probe passes, False when ``timeout`` passed first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            bound = remaining if self.attempt_timeout is None else \
                min(self.attempt_timeout, remaining)
            verdict = await _attempt(self.probe, bound)
            self.on_attempt(verdict)
            if verdict:
                return True
            await asyncio.sleep(max(0.0, min(self.interval, deadline - loop.time())))

    def start(self, on_result: Callable[[bool], None]) -> None:
        """Start in the running loop. Raises RuntimeError if already running."""
        async def go() -> None:
            on_result(await self.run())
        self._spawn(go, "readiness-probe")


class HealthRunner(_OneTask):
    """After ``grace``, runs ``probe`` every ``interval`` and calls ``on_pass`` or
    ``on_fail`` after each attempt, until cancelled; ``on_attempt`` (optional) gets each
    verdict first. Counting consecutive failures is the instance machine's job
    (``HealthFailed``/``HealthOk``)."""

    def __init__(self, probe: Probe, *, interval: float, timeout: float, grace: float,
                 on_pass: Callable[[], None], on_fail: Callable[[], None],
                 on_attempt: Callable[[Verdict], None] | None = None) -> None:
        super().__init__()
        self.probe, self.interval, self.timeout, self.grace = probe, interval, timeout, grace
        self.on_pass, self.on_fail = on_pass, on_fail
        self.on_attempt = on_attempt or (lambda verdict: None)

    async def run(self) -> None:
        """Loops until cancelled; never returns on its own."""
        await asyncio.sleep(self.grace)
        while True:
            verdict = await _attempt(self.probe, self.timeout)
            self.on_attempt(verdict)
            (self.on_pass if verdict else self.on_fail)()
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        """Start in the running loop. Raises RuntimeError if already running."""
        self._spawn(self.run, "health-check")
