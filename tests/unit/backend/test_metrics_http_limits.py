"""The metrics listener's limits over real loopback sockets: a connection that does not
deliver its request in time is closed, at most ``max_connections`` are served at once
(one beyond gets 503 and is closed without a thread, logged once in a while), and
closing the listener cuts the connections it serves."""

from __future__ import annotations

import asyncio
import http.client
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from backend.metrics import TenureCollector
from backend.metrics_http import MetricsListener, serve
from backend.testing import free_port

SHORT = 0.2  # the request timeout of these tests; every bound below is many times it
BOUND = 5.0

Serve = Callable[..., tuple[Any, int]]


@pytest.fixture()
def clients() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for c in opened:
        c.close()


@pytest.fixture()
def server() -> Iterator[Serve]:
    """``server(**limits)`` serves a registry on a free loopback port: (server, port)."""
    running: list[tuple[Any, threading.Thread]] = []

    def start(**limits: Any) -> tuple[Any, int]:
        registry = CollectorRegistry(auto_describe=False)
        Counter("probe_hits", "a family to see in the answer", registry=registry).inc(3)
        port = free_port()
        httpd, thread = serve("127.0.0.1", port, registry, **limits)
        running.append((httpd, thread))
        return httpd, port
    yield start
    for httpd, thread in running:
        httpd.server_close()
        httpd.shutdown()
        thread.join(BOUND)


def _connect(port: int, clients: list[socket.socket], send: bytes = b"") -> socket.socket:
    c = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    clients.append(c)
    if send:
        c.sendall(send)
    return c


def _read_to_eof(c: socket.socket, bound: float = BOUND) -> bytes:
    """What the server sent until it closed; raises TimeoutError if it did not close
    within ``bound``."""
    end = time.monotonic() + bound
    got = b""
    while (left := end - time.monotonic()) > 0:
        c.settimeout(left)
        chunk = c.recv(65536)
        if not chunk:
            return got
        got += chunk
    raise TimeoutError("the server kept the connection open")


def _until(condition: Callable[[], bool], bound: float = BOUND) -> bool:
    end = time.monotonic() + bound
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def _started_since(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads alive now that were not at ``before``: immune to threads that other
    tests left ending in the background."""
    return [t for t in threading.enumerate() if t not in before]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _scrape(port: int) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=BOUND)
    try:
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("sent", [b"", b"GET /met", b"GET /metrics HTTP/1.0\r\nHost: x\r\n"],
                         ids=["nothing", "part-of-the-request-line", "headers-unfinished"])
def test_a_connection_without_a_whole_request_is_closed_after_the_timeout(
        server: Serve, clients: list[socket.socket], sent: bytes) -> None:
    _, port = server(request_timeout=SHORT)
    fds = _fds()
    idle = [_connect(port, clients, sent) for _ in range(3)]
    for c in idle:
        assert _read_to_eof(c) == b""
    for c in idle:
        c.close()
    assert _until(lambda: _fds() <= fds), "the server kept its side of the connections"


def test_a_client_trickling_its_request_is_closed_at_the_deadline(
        server: Serve, clients: list[socket.socket]) -> None:
    _, port = server(request_timeout=SHORT)
    c = _connect(port, clients, b"GET /metrics HTTP/1.0\r\nX-Long: ")
    closed = False
    end = time.monotonic() + BOUND
    while not closed and time.monotonic() < end:
        try:
            c.sendall(b"x")  # a byte well within any timeout per read
            if select.select([c], [], [], 0.05)[0]:
                closed = c.recv(65536) == b""
        except (BrokenPipeError, ConnectionResetError):
            closed = True
    assert closed, "a client sending a byte every 50 ms was kept past the request deadline"


def test_connections_beyond_the_bound_get_503_and_no_thread(
        server: Serve, clients: list[socket.socket]) -> None:
    httpd, port = server(request_timeout=30.0, max_connections=4)
    before = set(threading.enumerate())
    for _ in range(4):
        _connect(port, clients)
    extra = [_connect(port, clients) for _ in range(5)]
    for c in extra:
        answer = _read_to_eof(c)
        assert answer.startswith(b"HTTP/1.0 503 "), answer
    # the bound is full of idle connections: a scrape is refused too, as documented
    assert _scrape(port)[0] == 503
    assert len(_started_since(before)) == 4
    assert httpd.refused == 6


def test_refusals_are_logged_once_in_a_while_not_per_connection(
        server: Serve, clients: list[socket.socket], caplog: pytest.LogCaptureFixture
) -> None:
    httpd, port = server(request_timeout=30.0, max_connections=1)
    _connect(port, clients)
    with caplog.at_level(logging.WARNING, logger="backend.metrics_http"):
        for _ in range(10):
            assert _read_to_eof(_connect(port, clients)).startswith(b"HTTP/1.0 503 ")
    assert httpd.refused == 10
    warnings = [r for r in caplog.records if r.name == "backend.metrics_http"]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "refused 1 connection" in warnings[0].getMessage()


def test_a_scrape_answers_once_the_timeout_closed_the_idle_connections(
        server: Serve, clients: list[socket.socket]) -> None:
    _, port = server(request_timeout=SHORT, max_connections=2)
    idle = [_connect(port, clients, b"GET /met") for _ in range(2)]
    for c in idle:
        assert _read_to_eof(c) == b""
    status, body = _scrape(port)
    assert status == 200
    assert b"probe_hits_total 3.0" in body


def test_closing_the_listener_cuts_the_connections_it_serves(
        clients: list[socket.socket]) -> None:
    port = free_port()
    before = set(threading.enumerate())
    started: list[threading.Thread] = []

    async def main() -> None:
        listener = MetricsListener(TenureCollector(lambda: {}))
        await listener.apply(f"127.0.0.1:{port}")
        for _ in range(500):  # bounded: binding a free port takes one try
            if listener.state()["bound"]:
                break
            await asyncio.sleep(0.01)
        assert listener.state()["bound"]
        for _ in range(3):
            _connect(port, clients)
        # served, not waiting in the backlog: the listener thread and one per connection
        assert _until(lambda: len(_started_since(before)) == 4)
        started.extend(_started_since(before))
        await listener.close()

    asyncio.run(main())
    for c in clients:
        # well within the listener's request timeout: the close cut them, not the timeout
        assert _read_to_eof(c, bound=BOUND) == b""
    assert _until(lambda: not any(t.is_alive() for t in started))
