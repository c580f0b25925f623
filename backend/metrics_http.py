"""The Prometheus listener of ``[metrics] listen``: prometheus_client's exposition,
served at ``/metrics`` only (GET and HEAD) by the standard library's WSGI server, one
thread per scrape. Any other path is 404, so a mistyped scrape path or a probe of ``/``
is told so instead of getting the metrics.

Handoff: the listener belongs to the backend generation and is upgraded with it. The
incumbent closes it first thing when it retires; the candidate binds it once its API is
open. The guardian starts the candidate only after the incumbent retired, so the port is
free by then and the gap without a listener lies inside the handoff pause. The server
sets SO_REUSEADDR (connections of the old listener in TIME_WAIT do not block the bind)
but not SO_REUSEPORT: two generations never answer scrapes side by side, so a scrape
never sees the old generation's numbers after the new one took over. If the port is
still taken (a rollback racing a slow exit, or another program), binding is retried
every RETRY seconds; ``state`` says why it is not listening.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from .config_metrics import parse_listen
from .metrics import TenureCollector

__all__ = ["RETRY", "MetricsListener"]

log = logging.getLogger(__name__)

RETRY = 0.05
RETRY_MAX = 2.0


class MetricsListener:
    """Serves one collector at the configured address, or nothing. Use on the loop."""

    def __init__(self, collector: TenureCollector) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.listen: str | None = None
        self.error: str | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._binder: asyncio.Task[None] | None = None

    def state(self) -> dict[str, Any]:
        return {"listen": self.listen, "bound": self._server is not None,
                "error": self.error}

    async def apply(self, listen: str | None) -> None:
        """Serve at ``listen`` (``HOST:PORT``, validated by the config), or stop serving
        (None). Returns at once; binding goes on in the background until it succeeds."""
        if listen == self.listen:
            return
        await self.close()
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
        """Stop serving and release the port; a scrape in progress is cut. Idempotent."""
        if self._binder is not None:
            self._binder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._binder
            self._binder = None
        server, self._server = self._server, None
        if server is not None:
            server.server_close()  # the port is free from here on
            await asyncio.to_thread(server.shutdown)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)
            self._thread = None
        self.listen = None


PATH = "/metrics"
_NOT_HERE = f"tenure serves its metrics at {PATH}\n".encode()

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def routed(metrics: Wsgi) -> Wsgi:
    """``metrics`` at :data:`PATH` for GET and HEAD (the same headers, no body; what
    else it does with a method it answers itself: OPTIONS, 405), 404 elsewhere."""
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [_NOT_HERE]
        if environ["REQUEST_METHOD"] == "HEAD":
            return _head(metrics, environ, start_response)
        return metrics(environ, start_response)
    return app


def _head(metrics: Wsgi, environ: dict[str, Any], start_response: Callable[..., Any]
          ) -> list[bytes]:
    """GET's status and headers with the length of the body it would send, no body."""
    answered: list[tuple[str, list[tuple[str, str]]]] = []
    body = b"".join(metrics({**environ, "REQUEST_METHOD": "GET"},
                            lambda status, headers, *_: answered.append((status, headers))))
    status, headers = answered[0]
    start_response(status, [*headers, ("Content-Length", str(len(body)))])
    return []


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged: one line each, every few seconds."""


def serve(host: str, port: int, registry: CollectorRegistry
          ) -> tuple[WSGIServer, threading.Thread]:
    """Bind ``host:port`` (an IP literal or localhost) and serve on a daemon thread.
    Raises OSError (the port is taken, the address is not this machine's)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                flags=socket.AI_PASSIVE)[0][0]
    server_class = type("MetricsServer", (ThreadingMixIn, WSGIServer),
                        {"address_family": family, "daemon_threads": True})
    httpd: WSGIServer = make_server(host, port, routed(make_wsgi_app(registry)),
                                    server_class, handler_class=_Quiet)
    thread = threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True)
    thread.start()
    return httpd, thread
