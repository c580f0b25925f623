"""The Prometheus listener of ``[metrics] listen``: prometheus_client's own HTTP server.

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
import threading
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

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
                self._server, self._thread = start_http_server(
                    addr[1], addr=addr[0], registry=self.registry)
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
