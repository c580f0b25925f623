"""A tcp health check counts only the app's own listener, as tcp readiness does.

Was: tcp readiness failed with "another process listens on the port, not the app" when a
foreign process held the port, but tcp health only connected, so it went on passing
against that same foreign listener. Loopback sockets bound to port 0 by the test itself
stand for the foreign process; a real ``sleep`` in its own session stands for the app.
Needs netlink sock_diag, as the backend does to tell listeners apart.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

from backend.config import parse_config
from backend.explain import Check
from backend.model import Health, HealthKind, Readiness, ReadyKind
from backend.probes import (
    Held,
    TcpMethod,
    Verdict,
    group_of,
    health_probe,
    readiness_probe,
)
from backend.supervisor import Supervisor
from backend.testing import FakeOwner, no_sleep

HANG_GUARD = 30.0  # reached only when broken; never a timing assert
FOREIGN = Verdict(False, "another process listens on the port, not the app")
T = TypeVar("T")


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await asyncio.wait_for(coro_fn(), HANG_GUARD)
    return asyncio.run(main())


@contextmanager
def foreign_listener() -> Iterator[socket.socket]:
    """A socket listening on 127.0.0.1 (a port the kernel chose), held by this process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s


@contextmanager
def app_process() -> Iterator[int]:
    """A real app: a ``sleep`` leading its own session, listening on nothing."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def owner_says(inodes: set[int]) -> Held:
    async def held() -> set[int] | None:
        return set(inodes)
    return held


async def both(port: int, pids: Callable[[], set[int]], held: Held | None
               ) -> tuple[Verdict | bool, Verdict | bool]:
    """(readiness verdict, health verdict) for ``port``, built as the backend builds them."""
    ready = readiness_probe(Readiness(kind=ReadyKind.TCP, port=port), 0, pids,
                            method=TcpMethod.DIAG, held=held)
    health = health_probe(Health(kind=HealthKind.TCP, port=port, failures=1), 0, pids,
                          method=TcpMethod.DIAG, held=held)
    assert ready is not None
    return await ready(), await health()


@pytest.mark.parametrize("source", ["owner", "proc"])
def test_tcp_health_counts_a_listener_only_when_it_is_the_apps(source: str) -> None:
    """``owner``: the owner says which sockets the app holds; ``proc``: an older owner,
    the app's process group is read from /proc. The same listener fails both checks, in
    the same words, while it is another process's, and passes both once it is the app's
    (the owner names its inode, or it is held by a process of the app's group: this
    process plays the app then)."""
    with foreign_listener() as s, app_process() as pid:
        port = s.getsockname()[1]
        if source == "owner":
            inode = os.fstat(s.fileno()).st_ino
            foreign = (group_of(pid), owner_says(set()))
            own = (group_of(pid), owner_says({inode}))
        else:
            foreign = (group_of(pid), None)
            own = (lambda: {os.getpid()}, None)
        assert run(lambda: both(port, *foreign)) == (FOREIGN, FOREIGN)
        assert run(lambda: both(port, *own)) == (Verdict(True, "listening"),
                                                 Verdict(True, "connected"))


def test_tcp_health_says_nothing_listens_as_readiness_does() -> None:
    with socket.socket() as s, app_process() as pid:
        s.bind(("127.0.0.1", 0))  # taken, never listening
        port = s.getsockname()[1]
        nothing = Verdict(False, "nothing listens on the port")
        assert run(lambda: both(port, group_of(pid), None)) == (nothing, nothing)


class SocketsOwner(FakeOwner):
    """Answers ``launch.sockets``: the app's processes hold no socket."""

    def _launch_sockets(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"launch_key": p["launch_key"], "inodes": []}


APP = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'
       'health = {{ kind = "tcp", port = {port}, interval = 0.05, failures = 1 }}\n')


@pytest.mark.parametrize("capable", [True, False])
def test_the_reconciler_fails_tcp_health_against_a_foreign_listener(capable: bool) -> None:
    """As the backend runs it: the check the reconciler builds, with the owner's word on
    the app's sockets when it can give it (``capable``), else the app's group."""
    async def main() -> tuple[Any, list[dict[str, Any]]]:
        owner = SocketsOwner()
        sup = Supervisor(owner, 1, sleep=no_sleep)
        sup.owner_capabilities = {"socketInodes": 1} if capable else {}
        try:
            with foreign_listener() as s:
                text = APP.format(port=s.getsockname()[1])
                sup.ensure(parse_config(text, "t").apps()[0], 0, True)
                inst = sup.instances["s/a/0"]
                deadline = time.monotonic() + 10.0
                while inst.last_probe is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                return inst.last_probe, owner.sent("launch.sockets")
        finally:
            await sup.aclose()

    note, asked = run(main)
    assert note is not None, "the health check never failed"
    assert (note.check, note.result) == (Check.HEALTH, FOREIGN.said)
    assert bool(asked) is capable
