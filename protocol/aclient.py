"""The asyncio RPC client (see :mod:`protocol.client` for the rules both clients keep).

Kept apart from the blocking client so a command-line call never imports asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from time import perf_counter
from typing import Any

from .client import MAX_QUEUED_EVENTS, _Common, connect_data
from .envelope import Event, Response, Welcome, decode_message
from .errors import (
    ConnectFailed,
    ProtocolError,
    RequestTimedOut,
    TransportLost,
)
from .framing import FrameDecoder, encode_frame
from .sockets import peer_credentials
from .timing import Timings

__all__ = ["AsyncClient", "NotSent"]


class NotSent(Exception):
    """A call withdrawn before it was sent (:meth:`AsyncClient.call`'s ``still``):
    nothing of it reached the server."""


class AsyncClient(_Common):
    """asyncio client; several calls may be outstanding on one connection (the server
    handles them concurrently and answers each when it has ended, by its id)."""

    def __init__(self, path: str | os.PathLike[str], **kw: Any) -> None:
        super().__init__(path, **kw)
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._lock = asyncio.Lock()
        self.losses = 0  # connections lost so far: a subscription lives on one of them
        self.timings: Timings | None = None  # per-method latency of calls, if kept
        self._turns: dict[str, asyncio.Semaphore] = {}

    def limit(self, methods: Iterable[str], at_most: int) -> None:
        """At most ``at_most`` calls of ``methods`` (together) outstanding at once; more
        wait for their turn before they are sent, and the wait is not part of their
        timeout. A server handles a bounded number of one connection's requests at once
        (protocol.server.MAX_INFLIGHT) and reads no further meanwhile: without a bound,
        a burst of calls that take long (a stop waits for the process to end) would hold
        every place, and a short call sent after them (a heartbeat) would time out."""
        turns = asyncio.Semaphore(at_most)
        for m in methods:
            self._turns[m] = turns

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        return self._writer is not None

    async def connect(self) -> Welcome:
        """As :meth:`Client.connect`."""
        async with self._lock:
            if self._writer is not None and self.welcome is not None:
                return self.welcome
            self._precheck()
            try:
                async with asyncio.timeout(self.connect_timeout):
                    reader, writer = await asyncio.open_unix_connection(self.path)
            except (OSError, TimeoutError) as exc:
                raise ConnectFailed(f"cannot connect to {self.path}: {exc}",
                                    connect_data(self.path, exc)) from None
            try:
                async with asyncio.timeout(self.connect_timeout):
                    welcome = await self._handshake(reader, writer)
            except (OSError, TimeoutError, TransportLost) as exc:
                writer.transport.abort()
                why = f"no answer within {self.connect_timeout:g} s" \
                    if isinstance(exc, TimeoutError) else str(exc)
                raise ConnectFailed(f"handshake with {self.path} failed: {why}") from None
            except BaseException:
                writer.transport.abort()
                raise
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read_loop(reader, writer))
            return welcome

    async def _handshake(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> Welcome:
        peer = peer_credentials(writer.get_extra_info("socket"))
        writer.write(encode_frame(self.hello.to_wire(), self.max_frame))
        await writer.drain()
        self._decoder = FrameDecoder(self.max_frame)
        self._early: list[dict[str, Any]] = []
        while not self._early:
            data = await reader.read(262144)
            if not data:
                raise TransportLost("server closed the connection during the handshake")
            self._early.extend(self._decoder.feed(data))
        return self._accept_welcome(self._early.pop(0), peer.pid)

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   epoch: int | None = None, timeout: float | None = None,
                   still: Callable[[], bool] | None = None) -> Any:
        """As :meth:`Client.call` (after its turn, for a method under :meth:`limit`).
        ``still``: asked once the turn is taken, right before the request is sent; when
        it says no, nothing is sent and NotSent is raised (a launch whose instance was
        stopped while the launch waited for its turn)."""
        async with self._turns.get(method) or contextlib.nullcontext():
            if still is not None and not still():
                raise NotSent(f"{method}: withdrawn before it was sent")
            return await self._call(method, params, epoch, timeout)

    async def _call(self, method: str, params: Mapping[str, Any] | None,
                    epoch: int | None, timeout: float | None) -> Any:
        await self.connect()
        writer = self._writer
        assert writer is not None
        rid, data = self._request(method, params, epoch)
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        t0 = perf_counter()
        try:
            writer.write(data)
            async with asyncio.timeout(self.timeout if timeout is None else timeout):
                msg = await fut
        except TimeoutError:
            self._abort(writer)
            raise RequestTimedOut(f"{method}: no answer in time", request_id=rid) from None
        except (OSError, TransportLost) as exc:
            self._abort(writer)
            raise TransportLost(f"{method}: connection lost ({exc})", request_id=rid) from None
        finally:
            self._pending.pop(rid, None)
            if self.timings is not None:  # answered, failed or timed out alike
                self.timings.observe(method, perf_counter() - t0)
        if msg.err is not None:
            raise msg.err.to_exception()
        return msg.ok

    async def next_event(self, timeout: float | None = None) -> Event | None:
        """The next pushed event or None after ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                return await self._events.get()
        except TimeoutError:
            return None

    async def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._abort(self._writer)
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)
            self._reader_task = None

    def _abort(self, writer: asyncio.StreamWriter) -> None:
        writer.transport.abort()
        if self._writer is writer:
            self._writer = None
            self.losses += 1
        for rid, fut in list(self._pending.items()):
            if not fut.done():
                fut.set_exception(TransportLost("connection lost", request_id=rid))

    async def _read_loop(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        frames, self._early = self._early, []
        try:
            while True:
                for frame in frames:
                    self._dispatch(decode_message(frame), writer)
                self._decoder.check()
                data = await reader.read(262144)
                if not data:
                    break
                frames = self._decoder.feed(data)
        except (OSError, ProtocolError):
            pass
        self._abort(writer)

    def _dispatch(self, msg: Any, writer: asyncio.StreamWriter) -> None:
        if isinstance(msg, Event):
            if self._events.qsize() >= MAX_QUEUED_EVENTS:
                self._events.get_nowait()
                self.dropped_events += 1
            self._events.put_nowait(msg)
        elif isinstance(msg, Response):
            fut = self._pending.get(msg.id) if msg.id is not None else None
            if fut is not None and not fut.done():
                fut.set_result(msg)
            elif msg.id is None and msg.err is not None:
                for f in self._pending.values():
                    if not f.done():
                        f.set_result(msg)

