"""The Prometheus listener of ``[metrics] listen``: prometheus_client's exposition,
served at ``/metrics`` only (GET and HEAD) by the standard library's WSGI server, one
thread per scrape. Any other path is 404, so a mistyped scrape path or a probe of ``/``
is told so instead of getting the metrics.

Limits: the port may be reachable by more than scrapers, and the backend is the control
plane, so a connection costs a thread and an fd for a bounded time only. It has
REQUEST_TIMEOUT to deliver its whole request (idle and slow clients alike are closed),
at most MAX_CONNECTIONS are served at once, and one beyond that is answered 503 and
closed at once without a thread (counted, and logged at most once per
REFUSALS_LOG_EVERY). Out of file descriptors, it tries to accept again every
ACCEPT_RETRY seconds instead of spinning, and says so as seldom. Nothing is reserved
for scrapes: while idle connections fill the bound a scrape is refused too, until the
timeout closes them.

Handoff: the listener belongs to the backend generation and is upgraded with it. The
incumbent closes it first thing when it retires; the candidate binds it once its API is
open. The guardian starts the candidate only after the incumbent retired, so the port is
free by then and the gap without a listener lies inside the handoff pause. The server
sets SO_REUSEADDR (connections of the old listener in TIME_WAIT do not block the bind)
and IPV6_V6ONLY (``[::]`` is IPv6 only, as for app sockets), but not SO_REUSEPORT: two
generations never answer scrapes side by side, so a scrape never sees the old
generation's numbers after the new one took over. If the port is
still taken (a rollback racing a slow exit, or another program), binding is retried
every RETRY seconds; ``state`` says why it is not listening.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import Metric

from protocol.seldom import Seldom

from .config_metrics import parse_listen
from .metrics import TenureCollector, named

__all__ = ["MAX_CONNECTIONS", "REQUEST_TIMEOUT", "RETRY", "Exposition", "MetricsListener",
           "MetricsServer"]

log = logging.getLogger(__name__)

RETRY = 0.05
RETRY_MAX = 2.0

# Seconds a connection has to deliver its whole request, and each write of the answer may
# wait for the client to read: an idle or slow client is closed, not kept.
REQUEST_TIMEOUT = 10.0
# Connections served at once, each on a thread of its own; one more gets 503 and is
# closed, so a scanner or a stuck scraper cannot grow the backend's threads and fds.
MAX_CONNECTIONS = 16
# Connections the kernel queues for accept(): the standard library's 5 stalls a burst.
BACKLOG = 64
# A refusal is logged with those since the last such line, at most once this often.
REFUSALS_LOG_EVERY = 60.0
# Seconds the serving thread waits after accept() failed (out of descriptors) before it
# tries again: the connection stays queued, so selecting again at once would spin a CPU.
ACCEPT_RETRY = 0.25


class MetricsListener:
    """Serves one collector at the configured address, or nothing. Use on the loop.

    Keeps: at most one server and one binding task at a time. ``apply`` and ``close``
    run one after the other (``_lock``), so two quick changes cannot each start a
    server, one of them then out of reach of ``close``."""

    def __init__(self, collector: TenureCollector) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.listen: str | None = None
        self.error: str | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._binder: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    def state(self) -> dict[str, Any]:
        return {"listen": self.listen, "bound": self._server is not None,
                "error": self.error}

    async def apply(self, listen: str | None) -> None:
        """Serve at ``listen`` (``HOST:PORT``, validated by the config), or stop serving
        (None). Returns once the previous server is closed; binding goes on in the
        background until it succeeds. Nothing once :meth:`close` was called."""
        async with self._lock:
            if listen == self.listen or self._closed:
                return
            await self._stop()
            self.listen = listen
            if listen is not None:
                self._binder = asyncio.create_task(self._bind_loop(listen))

    async def _bind_loop(self, listen: str) -> None:
        addr = parse_listen(listen)
        assert addr is not None, listen  # validated with the config
        delay = RETRY
        while True:
            try:
                self._server, self._thread = serve(addr[0], addr[1], self.registry)
            except OSError as e:
                if self.error != e.strerror:
                    log.warning("metrics listener %s: %s; retrying", listen, e.strerror)
                self.error = e.strerror
                await asyncio.sleep(delay)
                delay = min(RETRY_MAX, delay * 2)
                continue
            self.error = None
            log.info("serving metrics at http://%s/metrics", listen)
            return

    async def close(self) -> None:
        """Stop serving for good and release the port; a scrape in progress is cut.
        An ``apply`` waiting for this one, or called later, does nothing. Idempotent."""
        async with self._lock:
            self._closed = True
            await self._stop()

    async def _stop(self) -> None:
        """Stop the binding task and the server, with ``_lock`` held."""
        if self._binder is not None:
            self._binder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._binder
            self._binder = None
        server, self._server = self._server, None
        if server is not None:
            await asyncio.to_thread(_shut, server)  # the port is free from here on
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)
            self._thread = None
        self.listen = None


def _shut(server: MetricsServer) -> None:
    """Stop the serving thread, then free the port and cut the connections. In this
    order: a socket closed under the thread's select() fails its accept() (EBADF), which
    it would report as out of descriptors. On a thread of its own, so a cancelled
    caller still leaves the server closed."""
    server.shutdown()
    server.server_close()


PATH = "/metrics"
_NOT_HERE = f"tenure serves its metrics at {PATH}\n".encode()
_NOT_ALLOWED = f"{PATH} answers GET and HEAD\n".encode()
_BUSY_BODY = b"tenure's metrics listener is serving all the connections it takes; retry\n"
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\n"
         b"Content-Type: text/plain; charset=utf-8\r\n"
         b"Content-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\n"
         b"Connection: close\r\n\r\n" + _BUSY_BODY)

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def routed(metrics: Wsgi) -> Wsgi:
    """``metrics`` at :data:`PATH` for GET and HEAD (the same headers, no body); any
    other method is 405, naming the two (prometheus_client's own app answered OPTIONS
    with 200 and an Allow that left HEAD out); 404 elsewhere. HEAD gets headers only,
    a 404 included."""
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        if environ.get("PATH_INFO") != PATH:
            return _plain("404 Not Found", _NOT_HERE, method, start_response)
        if method == "HEAD":
            return _head(metrics, environ, start_response)
        if method != "GET":
            return _plain("405 Method Not Allowed", _NOT_ALLOWED, method, start_response,
                          [("Allow", "GET, HEAD")])
        return metrics(environ, start_response)
    return app


def _plain(status: str, body: bytes, method: str, start_response: Callable[..., Any],
           extra: list[tuple[str, str]] | None = None) -> list[bytes]:
    """A text answer: ``body`` with its length, or to HEAD the same headers alone."""
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body))), *(extra or [])])
    return [] if method == "HEAD" else [body]


def _head(metrics: Wsgi, environ: dict[str, Any], start_response: Callable[..., Any]
          ) -> list[bytes]:
    """GET's status and headers with the length of the body it would send, no body."""
    answered: list[tuple[str, list[tuple[str, str]]]] = []
    body = b"".join(metrics({**environ, "REQUEST_METHOD": "GET"},
                            lambda status, headers, *_: answered.append((status, headers))))
    status, headers = answered[0]
    start_response(status, [*headers, ("Content-Length", str(len(body)))])
    return []


class _RequestReader(io.RawIOBase):
    """The connection's bytes as long as ``deadline`` (``time.monotonic``) has not passed:
    the whole request must arrive by then, so a client that trickles it in a byte at a
    time is cut like one that sends nothing (a timeout per read would let it stay)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        """Raises TimeoutError once the deadline passed, or what ``recv_into`` raises."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _AnswerWriter(io.BufferedIOBase):
    """Writes straight to the connection, each write waiting at most ``timeout`` for a
    client that does not read its answer."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self._sock = sock
        self._timeout = timeout

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        """Raises TimeoutError (the client stopped reading) or what ``sendall`` raises."""
        self._sock.settimeout(self._timeout)
        self._sock.sendall(data)
        with memoryview(data) as view:
            return view.nbytes


class _Handler(WSGIRequestHandler):
    """One connection, one request (HTTP/1.0), within the server's time limits."""

    def setup(self) -> None:
        """The connection's files: reads end at the request deadline, each write waits
        the request timeout at most. Raises nothing."""
        server = self.server
        assert isinstance(server, MetricsServer), server
        self.connection = self.request
        limit = server.request_timeout
        self.rfile = io.BufferedReader(_RequestReader(self.connection,
                                                      time.monotonic() + limit))
        self.wfile = _AnswerWriter(self.connection, limit)

    def handle(self) -> None:
        """Serve the request; raises nothing for a client that was too slow or went away
        (there is no one left to answer, and a traceback per port scan is noise)."""
        with contextlib.suppress(OSError):
            super().handle()

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged: one line each, every few seconds."""


class MetricsServer(ThreadingMixIn, WSGIServer):
    """The WSGI server with a thread per connection, at most ``max_connections`` of them.
    A connection beyond the bound gets :data:`_BUSY` and is closed at once, unread and
    without a thread; closing the server cuts the connections it is serving."""

    request_queue_size = BACKLOG
    daemon_threads = True
    block_on_close = False  # nothing to join: server_close cuts every connection

    def __init__(self, addr: tuple[str, int], family: socket.AddressFamily,
                 request_timeout: float, max_connections: int) -> None:
        """Bind and listen. Raises OSError (the port is taken, the address is not this
        machine's)."""
        self.address_family = family
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self._refusals = Seldom(REFUSALS_LOG_EVERY)
        self._accept_failures = Seldom(REFUSALS_LOG_EVERY)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()  # served now; guarded by _lock
        self._closing = False
        super().__init__(addr, _Handler)

    def server_bind(self) -> None:
        """Bind as the owner binds an app's socket: ``[::]:P`` is IPv6 only, so it
        never takes IPv4 ``:P`` from an app (the config check treats the families
        apart). Raises OSError."""
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        super().server_bind()

    @property
    def refused(self) -> int:
        """Connections refused beyond ``max_connections``, since start."""
        return self._refusals.total

    @property
    def accept_failed(self) -> int:
        """Attempts to accept that failed (out of descriptors), since start."""
        return self._accept_failures.total

    def get_request(self) -> tuple[socket.socket, Any]:
        """Accept a connection. Raises OSError, which socketserver drops: the client
        gave up (ConnectionAbortedError), or accept() failed, e.g. out of descriptors,
        and then only after the failure was counted, logged at most once per
        REFUSALS_LOG_EVERY, and ACCEPT_RETRY waited. Serving thread only."""
        try:
            return super().get_request()
        except ConnectionAbortedError:
            raise
        except OSError as exc:
            self._note_accept_failed(exc)
            time.sleep(ACCEPT_RETRY)
            raise

    def _note_accept_failed(self, exc: OSError) -> None:
        """Count a failed accept() and log the count at most once per REFUSALS_LOG_EVERY,
        without a traceback. Serving thread only."""
        said = self._accept_failures.due()
        if said:
            log.error("metrics listener: cannot accept connections: %s; retrying every "
                      "%g s (%d attempt(s) failed since the last such line, logged at most "
                      "every %g s)", exc.strerror or exc, ACCEPT_RETRY, said,
                      REFUSALS_LOG_EVERY)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve ``request`` on a daemon thread, or refuse it when ``max_connections``
        are open. Keeps: every live handler thread holds one connection in ``_open``,
        and ``_open`` never exceeds the bound. Raises what ``Thread.start`` raises (the
        caller then closes the connection)."""
        with self._lock:
            closing, admitted = self._closing, len(self._open) < self.max_connections
            if admitted and not closing:
                self._open.add(request)
        if closing:
            super().shutdown_request(request)
        elif not admitted:
            self._refuse(request)
        else:
            threading.Thread(target=self.process_request_thread, args=(request, client_address),
                             name="metrics-connection", daemon=True).start()

    def shutdown_request(self, request: Any) -> None:
        """Close a connection that was served. Raises nothing."""
        # out of _open before it is closed, so server_close never touches a closed socket
        with self._lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def server_close(self) -> None:
        """Free the port and cut every connection being served, so each handler thread
        ends now (its client reads EOF) instead of at its timeout. Idempotent; raises
        nothing."""
        super().server_close()
        with self._lock:
            self._closing = True
            for conn in self._open:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def _refuse(self, request: socket.socket) -> None:
        """Answer 503 and close, on the serving thread without blocking. Raises nothing."""
        self._note_refused()  # first: whoever reads the 503 finds it counted
        request.setblocking(False)
        with contextlib.suppress(OSError):
            request.send(_BUSY)
        with contextlib.suppress(OSError):
            # what the client already sent: closing over unread bytes resets the
            # connection, and the client might lose the 503 it has not read yet
            request.recv(65536)
        super().shutdown_request(request)

    def _note_refused(self) -> None:
        """Count a refusal and log the count at most once per REFUSALS_LOG_EVERY, so a
        flood of connections cannot flood the log. Serving thread only."""
        said = self._refusals.due()
        if said:
            log.warning("metrics listener: refused %d connection(s) beyond the %d it "
                        "serves at once (reported at most every %g s)", said,
                        self.max_connections, REFUSALS_LOG_EVERY)


class Exposition:
    """What the exposition app is given in place of ``registry``: every family, and
    with ``?name[]=`` the families named. prometheus_client's own restriction looks a
    collector up by the names its ``describe`` gave, and tenure's collector describes
    none (registering must not scrape): it answered such a scrape with nothing."""

    def __init__(self, registry: CollectorRegistry, names: frozenset[str] | None = None
                 ) -> None:
        self._registry = registry
        self._names = names

    def collect(self) -> Iterator[Metric]:
        families = self._registry.collect()
        yield from families if self._names is None else named(families, self._names)

    def restricted_registry(self, names: Iterable[str]) -> Exposition:
        """The same registry, ``names`` only; called by make_wsgi_app for ``name[]``."""
        return Exposition(self._registry, frozenset(names))


def serve(host: str, port: int, registry: CollectorRegistry, *,
          request_timeout: float = REQUEST_TIMEOUT, max_connections: int = MAX_CONNECTIONS
          ) -> tuple[MetricsServer, threading.Thread]:
    """Bind ``host:port`` (an IP literal or localhost) and serve on a daemon thread.
    Raises OSError (the port is taken, the address is not this machine's)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                flags=socket.AI_PASSIVE)[0][0]
    httpd = MetricsServer((host, port), family, request_timeout, max_connections)
    httpd.set_app(routed(make_wsgi_app(Exposition(registry))))
    thread = threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True)
    thread.start()
    return httpd, thread
