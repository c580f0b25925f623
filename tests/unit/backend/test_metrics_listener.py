"""The metrics listener's life over real loopback sockets: address changes and close run
one after the other, so no server outlives ``close``, and a server is stopped before
its socket is closed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from backend import metrics_http
from backend.metrics import TenureCollector
from backend.metrics_http import MetricsListener
from backend.testing import free_port

BOUND = 5.0


class _Servers:
    """Every server the listener starts, each ``shutdown`` held until ``release`` is
    set (a slow shutdown), and the order of the calls that end it."""

    def __init__(self) -> None:
        self.made: list[Any] = []
        self.calls: list[tuple[str, int]] = []
        self.release = threading.Event()
        self._serve = metrics_http.serve

    def serve(self, host: str, port: int, registry: Any, **limits: Any) -> Any:
        httpd, thread = self._serve(host, port, registry, **limits)
        self.made.append(httpd)
        shutdown, server_close = httpd.shutdown, httpd.server_close

        def held_shutdown() -> None:
            self.release.wait(BOUND)
            self.calls.append(("shutdown", port))
            shutdown()

        def noted_close() -> None:
            self.calls.append(("server_close", port))
            server_close()
        httpd.shutdown, httpd.server_close = held_shutdown, noted_close
        return httpd, thread

    def open(self) -> list[int]:
        """Ports of the servers whose listening socket is still open."""
        return [h.server_address[1] for h in self.made if h.socket.fileno() != -1]

    def end(self) -> None:
        """Close what a failing listener left open, so the test leaks nothing."""
        self.release.set()
        for h in self.made:
            if h.socket.fileno() != -1:
                h.shutdown()
                h.server_close()


@pytest.fixture()
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Servers]:
    s = _Servers()
    monkeypatch.setattr(metrics_http, "serve", s.serve)
    yield s
    s.end()


async def _bound(listener: MetricsListener) -> None:
    for _ in range(500):  # bounded: binding a free port takes one try
        if listener.state()["bound"]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not bound: {listener.state()}")


def test_two_quick_address_changes_leave_no_listener_after_close(servers: _Servers) -> None:
    """Applying B and C while A's shutdown was slow started a server for both; close()
    reached only one, and the other kept its port until the backend ended."""
    a, b, c = (f"127.0.0.1:{free_port()}" for _ in range(3))

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        listener = MetricsListener(TenureCollector(lambda: {}))
        await listener.apply(a)
        await _bound(listener)
        changes = [asyncio.create_task(listener.apply(x)) for x in (b, c)]
        for _ in range(10):   # both under way: B in A's shutdown, C behind it
            await asyncio.sleep(0)
        servers.release.set()
        await asyncio.gather(*changes)
        await _bound(listener)
        served = listener.state()
        await listener.close()
        await listener.apply(b)   # after close: nothing
        return served, listener.state()

    served, after = asyncio.run(main())
    assert servers.open() == []
    assert served["listen"] == c
    assert after == {"listen": None, "bound": False, "error": None}


def test_a_server_is_shut_down_before_its_socket_is_closed(servers: _Servers) -> None:
    """Closing the socket first failed the serving thread's accept() (EBADF), logged as
    an error (cannot accept connections: Bad file descriptor)."""
    servers.release.set()
    listen = f"127.0.0.1:{free_port()}"

    async def main() -> None:
        listener = MetricsListener(TenureCollector(lambda: {}))
        await listener.apply(listen)
        await _bound(listener)
        await listener.close()

    asyncio.run(main())
    port = int(listen.rpartition(":")[2])
    assert servers.calls == [("shutdown", port), ("server_close", port)]


class _Gen:
    """What ``Api._set_config`` uses of its generation; ``serve_metrics`` takes a few
    turns of the loop, as closing the previous server does."""

    def __init__(self, listen: str) -> None:
        self.config = _config(listen)
        self.server = None
        self.closing = False
        self.running = 0
        self.most = 0
        self.applied: list[str] = []

    async def serve_metrics(self) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        for _ in range(3):
            await asyncio.sleep(0)
        self.applied.append(self.config.metrics.listen)
        self.running -= 1


def _config(listen: str) -> Any:
    return SimpleNamespace(metrics=SimpleNamespace(listen=listen),
                           settings=SimpleNamespace(viewer_group=None))


def test_listen_changes_are_applied_one_at_a_time_and_not_after_close() -> None:
    """Each change started a task of its own without waiting for the one before: two
    quick changes had two tasks applying at once (and the first one's task was no
    longer referenced)."""
    from backend.api import Api

    async def main() -> _Gen:
        gen = _Gen("127.0.0.1:1")
        api = Api.__new__(Api)
        api.gen, api._metrics_task = gen, None
        for listen in ("127.0.0.1:2", "127.0.0.1:3"):
            api._set_config(_config(listen))
        assert api._metrics_task is not None
        await api._metrics_task
        gen.closing = True
        api._set_config(_config("127.0.0.1:4"))
        await api._metrics_task
        return gen

    gen = asyncio.run(main())
    assert gen.most == 1
    assert gen.applied == ["127.0.0.1:3", "127.0.0.1:3"]
