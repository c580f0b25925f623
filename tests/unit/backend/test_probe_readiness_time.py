"""A readiness probe may take what is left of ``ready.timeout``.

Was: every attempt was cut after a fixed 2 s ("no answer within 2s"), so an exec or http
check slower than that could never pass however long ``ready.timeout`` was, and the app
failed to start. Real ``sh``/``sleep`` processes and loopback sockets bound to port 0.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psutil

from backend.config import parse_config
from backend.instance import State
from backend.model import Readiness, ReadyKind
from backend.probes import ProbeRunner, Verdict, readiness_probe
from backend.supervisor import Supervisor
from backend.testing import FakeOwner, no_sleep, run_bounded

SLOW = 2.4        # seconds a check takes: longer than the old 2 s cap
HANG_GUARD = 30.0  # reached only when broken; never a timing assert
ENV = {"PATH": "/usr/bin:/bin"}
T = TypeVar("T")


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    return run_bounded(coro_fn, HANG_GUARD)  # type: ignore[no-any-return]


def no_children_left() -> None:
    kids = psutil.Process().children(recursive=True)
    assert kids == [], f"left behind: {kids}"


def test_a_slow_exec_readiness_passes_with_its_first_attempt() -> None:
    ready = Readiness(kind=ReadyKind.EXEC, command=("sleep", str(SLOW)), timeout=8.0)
    probe = readiness_probe(ready, 0, set, env=ENV)
    assert probe is not None
    seen: list[Verdict] = []
    runner = ProbeRunner(probe, interval=ready.interval, timeout=ready.timeout,
                         on_attempt=seen.append)
    t0 = time.monotonic()
    assert run(runner.run)
    assert seen == [Verdict(True, "exit 0")]
    assert time.monotonic() - t0 >= SLOW
    no_children_left()


def test_a_slow_http_readiness_passes_and_a_refused_one_is_retried_at_its_interval() -> None:
    """Refused while the app has not listened yet (retried every ``interval``), then one
    GET the app answers only after SLOW seconds: ready with that answer."""
    async def main() -> list[Verdict]:
        async def slow_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            await asyncio.sleep(SLOW)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))  # bound, not yet listening: connections are refused
        port = sock.getsockname()[1]
        ready = Readiness(kind=ReadyKind.HTTP, url=f"http://127.0.0.1:{port}/ready",
                          timeout=10.0, interval=0.05)
        probe = readiness_probe(ready, 0, set)
        assert probe is not None
        seen: list[Verdict] = []
        runner = ProbeRunner(probe, interval=ready.interval, timeout=ready.timeout,
                             on_attempt=seen.append)
        task = asyncio.create_task(runner.run())
        server: asyncio.Server | None = None
        try:
            await asyncio.sleep(0.5)
            server = await asyncio.start_server(slow_ok, sock=sock)
            assert await task
        finally:
            task.cancel()
            if server is not None:
                server.close()
                await server.wait_closed()
            sock.close()
        return seen

    seen = run(main)
    assert seen[-1] == Verdict(True, "status 200")
    assert len(seen) >= 3  # retried every 0.05 s while refused, not once per 0.5 s
    assert set(seen[:-1]) == {Verdict(False, "connection refused")}


def test_an_attempt_cut_by_the_deadline_says_so_in_round_seconds() -> None:
    async def hang() -> bool:
        await asyncio.sleep(3600)
        return True
    seen: list[Verdict] = []
    runner = ProbeRunner(hang, interval=0.01, timeout=0.5, on_attempt=seen.append)
    assert not run(runner.run)
    assert seen == [Verdict(False, "no answer within 0.5s")]


APP = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'
       '[stacks.s.apps.a.ready]\nkind = "exec"\ncommand = ["sleep", "{slow}"]\n'
       'timeout = 8\ninterval = 0.1\n')


def test_the_reconciler_lets_a_slow_exec_readiness_make_the_app_ready() -> None:
    """As the backend runs it: the readiness probe and runner the reconciler builds."""
    async def main() -> State:
        sup = Supervisor(FakeOwner(), 1, sleep=no_sleep)
        sup.base_env = dict(ENV)
        try:
            sup.ensure(parse_config(APP.format(slow=SLOW), "t").apps()[0], 0, True)
            inst = sup.instances["s/a/0"]
            deadline = time.monotonic() + 8.0 + 2.0  # ready.timeout, and some slack
            while inst.state is not State.READY and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return inst.state
        finally:
            await sup.aclose()

    assert run(main) is State.READY
    no_children_left()

