"""Accept connections on a listening socket, quietly when out of descriptors.

asyncio's own servers (3.11) handle a failed ``accept()`` badly: on EMFILE they log a
traceback and schedule a retry, but do not leave their loop over the backlog, so one
readable event logs up to ``backlog`` tracebacks and schedules as many retries, each of
which does the same. A daemon out of descriptors grew its log by megabytes a second and
never accepted. :class:`Acceptor` instead stops watching the socket on any such failure,
tries again ``retry`` seconds later, and says so at most once per ``log_every`` (with the
attempts that failed since), without a traceback: it spends no CPU while it waits and
serves again by itself once descriptors are free.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable

from .seldom import Seldom

__all__ = ["ACCEPT_LOG_EVERY", "ACCEPT_RETRY", "BACKLOG", "Acceptor"]

log = logging.getLogger("tenure.rpc")

BACKLOG = 100
"""Connections the kernel queues for us, and the most accepted per readable event (so
a burst does not hold the loop): asyncio's default."""
ACCEPT_RETRY = 0.25
"""Seconds between attempts to accept while ``accept()`` fails (out of descriptors)."""
ACCEPT_LOG_EVERY = 60.0
"""A failing ``accept()`` is logged at most once this often."""


class Acceptor:
    """Hands every connection accepted on ``sock`` to ``on_connection`` (a non-blocking
    socket it then owns), on the running loop, from :meth:`start` to :meth:`close`.
    ``clock`` is ``time.monotonic`` or a fake."""

    def __init__(self, sock: socket.socket, name: str,
                 on_connection: Callable[[socket.socket], None], *,
                 retry: float = ACCEPT_RETRY, log_every: float = ACCEPT_LOG_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sock = sock
        self.name = name
        self.on_connection = on_connection
        self.retry = retry
        self._failures = Seldom(log_every, clock)
        self._told = False  # the current failure was logged: its end is logged too
        self._loop: asyncio.AbstractEventLoop | None = None
        self._again: asyncio.TimerHandle | None = None

    @property
    def failed(self) -> int:
        """Attempts to accept that failed, since start."""
        return self._failures.total

    def start(self) -> None:
        """Listen and watch the socket. Raises OSError (``listen`` failed)."""
        self.sock.setblocking(False)
        self.sock.listen(BACKLOG)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.sock.fileno(), self._ready)

    def close(self) -> None:
        """Stop accepting and close the socket; what is queued is refused by the kernel.
        Idempotent; raises nothing."""
        if self._again is not None:
            self._again.cancel()
            self._again = None
        if self._loop is not None and self.sock.fileno() >= 0:
            self._loop.remove_reader(self.sock.fileno())
        self.sock.close()

    def _ready(self) -> None:
        """Accept what is queued, BACKLOG at most. Raises nothing: a failure pauses."""
        for _ in range(BACKLOG):
            try:
                conn, _addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue  # the peer gave up while queued; the next may be there
            except OSError as exc:
                self._pause(exc)
                return
            if self._told:
                log.info("accepting connections on %s again", self.name)
                self._told = False
            conn.setblocking(False)
            self.on_connection(conn)

    def _pause(self, exc: OSError) -> None:
        """Stop watching the socket for ``retry`` seconds and count the failure, logged
        at most once per ``log_every`` (so a daemon out of descriptors cannot flood its
        log). Keeps: while paused the socket is not watched, so it costs no CPU."""
        assert self._loop is not None
        said = self._failures.due()
        if said:
            log.error("cannot accept connections on %s: %s; retrying every %g s "
                      "(%d attempt(s) failed since the last such line, logged at most "
                      "every %g s)", self.name, exc.strerror or exc, self.retry,
                      said, self._failures.every)
            self._told = True
        self._loop.remove_reader(self.sock.fileno())
        self._again = self._loop.call_later(self.retry, self._resume)

    def _resume(self) -> None:
        """Watch the socket again: a queued connection makes it readable at once."""
        self._again = None
        assert self._loop is not None
        self._loop.add_reader(self.sock.fileno(), self._ready)
