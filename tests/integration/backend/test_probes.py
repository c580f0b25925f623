"""Readiness and health probes against real sockets and processes (loopback only)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

from backend import probes
from backend.model import Health, HealthKind, Readiness, ReadyKind
from backend.probes import (
    HealthRunner,
    ProbeRunner,
    TcpMethod,
    exec_ok,
    health_probe,
    http_ok,
    process_group_members,
    readiness_probe,
    tcp_listening,
)
from owner.testing import in_child_as

HANG_GUARD = 30.0  # reached only when broken; never a timing assert
T = TypeVar("T")

LISTEN_LATER = r"""
import socket, sys, time
family = socket.AF_INET6 if sys.argv[2] == "6" else socket.AF_INET
print("started", flush=True)
time.sleep(0.5)
s = socket.socket(family)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
sys.stdin.read()
"""


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await asyncio.wait_for(coro_fn(), HANG_GUARD)
    return asyncio.run(main())


def free_port(family: socket.AddressFamily = socket.AF_INET) -> int:
    with socket.socket(family) as s:
        s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def listener(family: socket.AddressFamily = socket.AF_INET) -> Iterator[int]:
    """A listening socket owned by THIS process; yields its port."""
    with socket.socket(family) as s:
        s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def sock_diag_works() -> bool:
    try:
        probes.listening_inodes(1)
        return True
    except (ImportError, OSError):
        return False


needs_diag = pytest.mark.skipif(not sock_diag_works(), reason="netlink sock_diag unavailable")


async def spawn_listener(port: int, v6: bool = False) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LISTEN_LATER, str(port), "6" if v6 else "4",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        start_new_session=True)
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"started\n"
    return proc


async def finish(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    await proc.wait()


# ---- tcp ----------------------------------------------------------------------------------


@needs_diag
@pytest.mark.parametrize("v6", [False, True])
def test_tcp_ready_only_once_the_child_listens_and_only_for_its_pids(v6: bool) -> None:
    family = socket.AF_INET6 if v6 else socket.AF_INET

    async def main() -> None:
        port = free_port(family)
        proc = await spawn_listener(port, v6)
        try:
            group = process_group_members(proc.pid)
            assert proc.pid in group
            assert not await tcp_listening(port, group, method=TcpMethod.DIAG)
            t0 = time.monotonic()
            runner = ProbeRunner(lambda: tcp_listening(port, group, method=TcpMethod.DIAG),
                                 interval=0.02, timeout=HANG_GUARD)
            assert await runner.run()
            assert time.monotonic() - t0 > 0.3  # not before the child listened
            assert proc.stdout is not None
            assert await asyncio.wait_for(proc.stdout.readline(), 1.0) == b"listening\n"
            # the same listener does not count for another process's pids
            assert not await tcp_listening(port, {os.getpid()}, method=TcpMethod.DIAG)
            assert not await tcp_listening(port, set(), method=TcpMethod.DIAG)
            # a listener owned by another process (this one) on another port
            with listener(family) as other:
                assert not await tcp_listening(other, group, method=TcpMethod.DIAG)
                assert await tcp_listening(other, {os.getpid()}, method=TcpMethod.DIAG)
        finally:
            await finish(proc)
        assert not await tcp_listening(port, group, method=TcpMethod.DIAG)
    run(main)


@needs_diag
def test_vanished_pids_are_not_an_error() -> None:
    async def main() -> None:
        with listener() as port:
            assert not await tcp_listening(port, {2**22 + 12345}, method=TcpMethod.DIAG)
    run(main)


def test_connect_fallback_sees_any_listener() -> None:
    async def main() -> None:
        with listener() as port:
            assert await tcp_listening(port, set(), method=TcpMethod.CONNECT)
        assert not await tcp_listening(free_port(), set(), method=TcpMethod.CONNECT)
    run(main)


def test_auto_falls_back_to_connect_when_sock_diag_is_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable(port: int) -> set[int]:
        raise OSError(93, "Protocol not supported")
    monkeypatch.setattr(probes, "listening_inodes", unavailable)

    async def main() -> None:
        with listener() as port:
            assert await tcp_listening(port, set(), method=TcpMethod.AUTO)
            assert not await tcp_listening(port, {os.getpid()}, method=TcpMethod.DIAG)
    run(main)


def test_netlink_errors_also_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyroute2
    from pyroute2.netlink.exceptions import NetlinkError

    class Broken:
        def __enter__(self) -> Broken:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def bind(self) -> None:
            raise NetlinkError(2, "no sock_diag module")
    monkeypatch.setattr(pyroute2, "DiagSocket", Broken)

    async def main() -> None:
        with listener() as port:
            assert await tcp_listening(port, set(), method=TcpMethod.AUTO)
            assert not await tcp_listening(port, {os.getpid()}, method=TcpMethod.DIAG)
    run(main)


def test_readiness_probe_from_config_uses_instance_port(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        with listener() as port:
            ready = Readiness(kind=ReadyKind.TCP, port=port - 2, port_step=1)
            probe = readiness_probe(ready, 2, lambda: {os.getpid()}, method=TcpMethod.CONNECT)
            assert probe is not None and await probe()
            health = health_probe(Health(kind=HealthKind.TCP, port=port), 0,
                                  lambda: {os.getpid()}, method=TcpMethod.CONNECT)
            assert await health()
    run(main)
    assert readiness_probe(Readiness(kind=ReadyKind.NOTIFY), 0, set) is None
    with pytest.raises(ValueError):
        readiness_probe(Readiness(kind=ReadyKind.HTTP, url="https://x/"), 0, set)


# ---- http ---------------------------------------------------------------------------------


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        request = await reader.readuntil(b"\r\n\r\n")
        path = request.split()[1]
        if path == b"/hang":
            await reader.read()  # never answer; returns when the client gives up
            return
        replies = {b"/ok": b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
                   b"/moved": b"HTTP/1.1 302 Found\r\nLocation: /ok\r\n\r\n",
                   b"/err": b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n",
                   b"/junk": b"SSH-2.0-OpenSSH\r\n"}
        writer.write(replies.get(path, b"HTTP/1.1 404 Nope\r\n\r\n"))
        await writer.drain()
    finally:
        writer.close()


def test_http_ok_statuses() -> None:
    async def main() -> None:
        server = await asyncio.start_server(_handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        try:
            assert await http_ok(f"{base}/ok", 2.0)
            assert await http_ok(f"{base}/moved", 2.0)
            assert not await http_ok(f"{base}/err", 2.0)
            assert not await http_ok(f"{base}/missing", 2.0)
            assert not await http_ok(f"{base}/junk", 2.0)
            t0 = time.monotonic()
            assert not await http_ok(f"{base}/hang", 0.3)
            assert time.monotonic() - t0 < 5.0
        finally:
            server.close()
            await server.wait_closed()
        assert not await http_ok(f"http://127.0.0.1:{free_port()}/ok", 2.0)  # refused
    run(main)


@pytest.mark.parametrize("url", ["https://127.0.0.1/", "ftp://x/", "http:///nohost",
                                 "http://127.0.0.1:99999/"])
def test_http_ok_refuses_urls_it_cannot_probe(url: str) -> None:
    with pytest.raises(ValueError):
        asyncio.run(http_ok(url, 1.0))


def test_probes_say_what_came_back() -> None:
    """Each verdict names what the target answered, in words (no reprs)."""
    async def main() -> None:
        server = await asyncio.start_server(_handle, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            said = [(v.ok, v.said) for v in [
                await http_ok(f"{base}/ok", 2.0), await http_ok(f"{base}/err", 2.0),
                await http_ok(f"{base}/junk", 2.0), await http_ok(f"{base}/hang", 0.3)]]
        finally:
            server.close()
            await server.wait_closed()
        assert said == [(True, "status 200"), (False, "status 500"),
                        (False, "the answer is not http"), (False, "no answer within 0.3s")]
        refused = free_port()
        assert (await probes.tcp_connect("127.0.0.1", refused, 2.0)).said == \
            "connection refused"
        assert (await http_ok(f"http://127.0.0.1:{refused}/", 2.0)).said == \
            "connection refused"
        env = {"PATH": "/usr/bin:/bin"}
        script = "echo; echo '  db \033 not up '; echo more; echo err >&2; exit 3"
        assert await exec_ok(("sh", "-c", script), 5.0, env) == \
            probes.Verdict(False, "exit 3: db ? not up")
        assert await exec_ok(("true",), 5.0, env) == probes.Verdict(True, "exit 0")
        assert await exec_ok(("sh", "-c", "kill -9 $$"), 5.0, env) == \
            probes.Verdict(False, "killed by SIGKILL")
        assert await exec_ok(("/nonexistent/chk",), 5.0, env) == \
            probes.Verdict(False, "cannot start: no such file or directory")
        assert (await exec_ok(("sleep", "5"), 0.2, env)).said == "no exit within 0.2s"
    run(main)
    no_children_left()
    assert probes.describe(Readiness(kind=ReadyKind.TCP, port=8000, port_step=2), 1) == \
        "tcp 127.0.0.1:8002"
    assert probes.describe(Health(kind=HealthKind.HTTP, url="http://h:1/x"), 0) == \
        "GET http://h:1/x"
    assert probes.describe(Health(kind=HealthKind.EXEC, command=("chk", "a b")), 0) == \
        "exec chk 'a b'"
    assert probes.describe(Readiness(kind=ReadyKind.NOTIFY), 0) == ""


# ---- exec ---------------------------------------------------------------------------------


def no_children_left() -> None:
    kids = psutil.Process().children(recursive=True)
    assert kids == [], f"left behind: {kids}"


def gone(pid: int) -> bool:
    try:
        p = psutil.Process(pid)
        return p.status() == psutil.STATUS_ZOMBIE and p.ppid() != os.getpid()
    except psutil.NoSuchProcess:
        return True


def assert_all_gone(pids: list[int]) -> None:
    """The shell and its background sleep died with the group (SIGKILL is asynchronous)."""
    deadline = time.monotonic() + HANG_GUARD
    while not all(gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(gone(p) for p in pids)


def test_exec_ok_true_false_missing() -> None:
    env = {"PATH": "/usr/bin:/bin"}
    assert run(lambda: exec_ok(("true",), 5.0, env))
    assert not run(lambda: exec_ok(("false",), 5.0, env))
    assert not run(lambda: exec_ok(("sh", "-c", "exit 3"), 5.0, env))
    assert not run(lambda: exec_ok(("/nonexistent/probe",), 5.0, env))
    no_children_left()


def _pids_in(path: Path) -> list[int]:
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        lines = path.read_text().split() if path.exists() else []
        if len(lines) == 2:
            return [int(x) for x in lines]
        time.sleep(0.01)
    raise AssertionError("the probe command never wrote its pids")


SLOW = "echo $$ > {f}.tmp; sleep 30 & echo $! >> {f}.tmp; mv {f}.tmp {f}; wait"


def test_exec_ok_timeout_kills_and_reaps_the_whole_group(short_home: Path) -> None:
    f = short_home / "pids"
    t0 = time.monotonic()
    assert not run(lambda: exec_ok(("sh", "-c", SLOW.format(f=f)), 0.5,
                                   {"PATH": "/usr/bin:/bin"}))
    assert time.monotonic() - t0 < 10.0
    no_children_left()
    assert_all_gone(_pids_in(f))


def test_cancelled_exec_probe_reaps_its_child(short_home: Path) -> None:
    f = short_home / "pids"

    async def main() -> None:
        task = asyncio.create_task(exec_ok(("sh", "-c", SLOW.format(f=f)), HANG_GUARD,
                                           {"PATH": "/usr/bin:/bin"}))
        while not f.exists():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        no_children_left()
    run(main)
    assert_all_gone(_pids_in(f))


# ---- runners ------------------------------------------------------------------------------


def only_current_task_left() -> None:
    """Only this test's own task and run()'s wrapper remain: the runners leaked nothing."""
    me = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not me and
              t.get_coro().__qualname__ != "run.<locals>.main"]
    assert others == []


def test_probe_runner_times_out_and_reports_once() -> None:
    async def main() -> None:
        calls = 0

        async def never() -> bool:
            nonlocal calls
            calls += 1
            return False
        results: list[bool] = []
        runner = ProbeRunner(never, interval=0.02, timeout=0.3)
        runner.start(results.append)
        with pytest.raises(RuntimeError):
            runner.start(results.append)
        while runner.running:
            await asyncio.sleep(0.02)
        assert results == [False] and calls >= 2
        await runner.aclose()
        only_current_task_left()
    run(main)


def test_probe_runner_survives_a_raising_and_a_hanging_probe() -> None:
    async def main() -> None:
        attempts: list[str] = []

        async def flaky() -> bool:
            attempts.append("x")
            if len(attempts) == 1:
                raise RuntimeError("boom")
            if len(attempts) == 2:
                await asyncio.sleep(3600)
            return True
        runner = ProbeRunner(flaky, interval=0.01, timeout=HANG_GUARD, attempt_timeout=0.2)
        assert await runner.run()
        assert len(attempts) == 3
    run(main)


def test_cancelling_runners_leaves_no_task() -> None:
    async def main() -> None:
        results: list[Any] = []

        async def slow() -> bool:
            await asyncio.sleep(3600)
            return True
        runner = ProbeRunner(slow, interval=0.01, timeout=HANG_GUARD, attempt_timeout=3600)
        runner.start(results.append)
        health = HealthRunner(slow, interval=0.01, timeout=3600, grace=0.0,
                              on_pass=lambda: results.append("pass"),
                              on_fail=lambda: results.append("fail"))
        health.start()
        await asyncio.sleep(0.05)
        await runner.aclose()
        await health.aclose()
        await health.aclose()  # idempotent
        assert results == [] and not runner.running and not health.running
        only_current_task_left()
    run(main)


def test_health_runner_waits_for_grace_then_reports_each_result() -> None:
    async def main() -> None:
        script = iter([True, False, False, True] + [True] * 1000)
        seen: list[str] = []
        started = time.monotonic()
        first: list[float] = []

        async def check() -> bool:
            first.append(time.monotonic())
            return next(script)
        health = HealthRunner(check, interval=0.01, timeout=1.0, grace=0.2,
                              on_pass=lambda: seen.append("pass"),
                              on_fail=lambda: seen.append("fail"))
        health.start()
        while len(seen) < 4:
            await asyncio.sleep(0.01)
        await health.aclose()
        assert seen[:4] == ["pass", "fail", "fail", "pass"]
        assert first[0] - started >= 0.19
        only_current_task_left()
    run(main)


def _as_uid(uid: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` in a forked child running as ``uid`` (no groups); its repr or the
    exception's class name."""
    got = in_child_as(uid, uid, lambda: repr(fn()))
    return got if isinstance(got, str) else got["exc"]


@pytest.mark.root
@needs_diag
def test_a_listener_of_an_app_running_as_another_user_counts_by_its_uid() -> None:
    """System scope: the backend may not read the app's /proc/PID/fd. The listener on the
    port counts when its socket belongs to the uid the app's process runs as, and not
    when it belongs to anyone else."""
    nobody, backend_uid = 65534, 4321
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child: the app, listening as nobody
        os.close(r)
        os.setgroups([])
        os.setresgid(nobody, nobody, nobody)
        os.setresuid(nobody, nobody, nobody)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        os.write(w, str(s.getsockname()[1]).encode())
        os.close(w)
        signal.pause()  # until the test kills it
        os._exit(0)
    os.close(w)
    try:
        with os.fdopen(r) as f:
            port = int(f.read())
        assert _as_uid(backend_uid, lambda: probes.socket_inodes({pid})) == "set()"
        assert _as_uid(backend_uid, lambda: probes._diag_owned(port, {pid}).ok) == "True"
        with listener() as mine:  # root's listener is not the app's
            assert _as_uid(backend_uid, lambda: probes._diag_owned(mine, {pid}).ok) == "False"
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_exec_probes_run_in_the_apps_cwd(tmp_path: Path) -> None:
    """Was: they ran in the backend's working directory, so `./check.sh` of an app with
    a `cwd` could not be started ("no such file or directory")."""
    check = tmp_path / "check.sh"
    check.write_text("#!/bin/sh\ntest -f here\n")
    check.chmod(0o755)
    (tmp_path / "here").touch()

    async def main() -> tuple[Any, Any]:
        ready = readiness_probe(Readiness(kind=ReadyKind.EXEC, command=("./check.sh",),
                                          timeout=5), 0, set, cwd=str(tmp_path))
        health = health_probe(Health(kind=HealthKind.EXEC, command=("./check.sh",),
                                     timeout=5), 0, set, cwd=str(tmp_path))
        assert ready is not None
        return await ready(), await health()
    ready, health = run(main)
    assert ready.ok and health.ok, (ready, health)
