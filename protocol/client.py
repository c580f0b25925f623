"""RPC clients, blocking and asyncio, with the same rules.

- Every (re)connection checks the socket file (owner, mode, not a symlink), the server's
  peer credentials against the identity it claims, and the pinned instance.
- A request already sent when the connection breaks raises ``TransportLost`` carrying its
  request id: the outcome is unknown and it is never replayed. The next call reconnects.
- A server with another instance than the pinned one raises ``OwnerChanged``; the client
  never adopts it silently (call ``unpin`` to accept a new instance deliberately).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import select
import socket
import time
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

from .envelope import Event, Hello, Request, Response, Welcome, decode_message
from .errors import (
    BadRequest,
    CapabilityMissing,
    ClientClosed,
    ConnectFailed,
    IdentityMismatch,
    OwnerChanged,
    ProtocolError,
    RequestTimedOut,
    TransportLost,
)
from .framing import DEFAULT_MAX_FRAME, FrameDecoder, encode_frame
from .identity import boot_id, start_ticks
from .sockets import check_socket_file, check_socket_path, peer_credentials

__all__ = ["AsyncClient", "Client"]

MAX_QUEUED_EVENTS = 100_000


class _Common:
    """Settings and handshake checks shared by both clients."""

    def __init__(self, path: str | os.PathLike[str], *, role: str = "admin",
                 want: Mapping[str, int] | None = None, expect_instance: str | None = None,
                 pin: bool = True, timeout: float = 30.0, connect_timeout: float = 5.0,
                 max_frame: int = DEFAULT_MAX_FRAME, owners: tuple[int, ...] | None = None,
                 allow_group: bool = False, name: str = "") -> None:
        self.path = check_socket_path(path)
        self.hello = Hello(role=role, want=dict(want or {}), client=name)
        self.expect_instance = expect_instance
        self.pin = pin
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self.owners = owners
        self.allow_group = allow_group
        self.welcome: Welcome | None = None
        self.dropped_events = 0
        self._ids = itertools.count(1)
        self._closed = False

    def unpin(self) -> None:
        """Accept whatever instance answers next (a deliberate operator decision)."""
        self.expect_instance = None

    def _precheck(self) -> None:
        if self._closed:
            raise ClientClosed("client was closed")
        try:
            check_socket_file(self.path, self.owners, self.allow_group)
        except FileNotFoundError:
            raise ConnectFailed(f"no socket at {self.path}", {"path": self.path}) from None

    def _accept_welcome(self, frame: dict[str, Any], peer_pid: int) -> Welcome:
        """Validate the server's first answer. Raises the server's error, IdentityMismatch,
        OwnerChanged or CapabilityMissing."""
        msg = decode_message(frame)
        if isinstance(msg, Response) and msg.err is not None:
            raise msg.err.to_exception()
        if not isinstance(msg, Welcome):
            raise BadRequest(f"expected welcome, got {frame.get('t')!r}")
        ident = msg.identity
        if ident.pid != peer_pid or ident.boot_id != boot_id() or \
                start_ticks(ident.pid) != ident.start_ticks:
            raise IdentityMismatch(
                f"server claims pid {ident.pid} but the socket peer is pid {peer_pid} "
                "or its start time differs", {"claimed": ident.to_wire(), "peer": peer_pid})
        if self.expect_instance is not None and ident.instance != self.expect_instance:
            raise OwnerChanged(
                f"server instance {ident.instance} is not the pinned {self.expect_instance}",
                {"expected": self.expect_instance, "actual": ident.instance})
        missing = {k: v for k, v in self.hello.want.items() if msg.capabilities.get(k) != v}
        if missing:
            raise CapabilityMissing(f"server lacks {missing}", {"missing": missing})
        if self.pin:
            self.expect_instance = ident.instance
        self.welcome = msg
        return msg

    def _request(self, method: str, params: Mapping[str, Any] | None,
                 epoch: int | None) -> tuple[int, bytes]:
        rid = next(self._ids)
        req = Request(rid, method, dict(params or {}), epoch)
        return rid, encode_frame(req.to_wire(), self.max_frame)


class Client(_Common):
    """Blocking client: one connection, one request at a time."""

    def __init__(self, path: str | os.PathLike[str], **kw: Any) -> None:
        super().__init__(path, **kw)
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder(self.max_frame)
        self._frames: deque[dict[str, Any]] = deque()
        self._events: deque[Event] = deque()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> Welcome:
        """Connect if needed. Raises ConnectFailed, UnsafePath, OwnerChanged, ..."""
        if self._sock is not None and self.welcome is not None:
            if self._idle_connection_alive():
                return self.welcome
            self._drop()
        self._precheck()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.connect_timeout)
            sock.connect(self.path)
            peer = peer_credentials(sock)
            sock.sendall(encode_frame(self.hello.to_wire(), self.max_frame))
            self._sock = sock
            frame = self._read_frame(time.monotonic() + self.connect_timeout)
            return self._accept_welcome(frame, peer.pid)
        except (OSError, TransportLost, RequestTimedOut) as exc:
            self._drop()
            sock.close()
            raise ConnectFailed(f"cannot connect to {self.path}: {exc}",
                                {"path": self.path}) from None
        except BaseException:
            self._drop()
            sock.close()
            raise

    def _idle_connection_alive(self) -> bool:
        """Before sending, notice a server that went away while we were idle (nothing is
        in flight, so reconnecting replays nothing). Pending events are kept."""
        assert self._sock is not None
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        try:
            while poller.poll(0):
                data = self._sock.recv(262144)
                if not data:
                    return False
                for frame in self._decoder.feed(data):
                    msg = decode_message(frame)
                    if isinstance(msg, Event):
                        self._queue_event(msg)
        except (OSError, ProtocolError):
            return False
        return True

    def call(self, method: str, params: Mapping[str, Any] | None = None, *,
             epoch: int | None = None, timeout: float | None = None) -> Any:
        """Send one request and wait for its answer.

        Raises the server's error (a TenureError subclass), TransportLost or
        RequestTimedOut (outcome unknown, request id attached), or connection errors
        from :meth:`connect` (nothing was sent).
        """
        self.connect()
        rid, data = self._request(method, params, epoch)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        try:
            assert self._sock is not None
            self._sock.settimeout(max(0.001, deadline - time.monotonic()))
            self._sock.sendall(data)
            while True:
                frame = self._read_frame(deadline)
                if frame.get("t") == "res" and frame.get("id") == rid and "ok" in frame:
                    return frame["ok"]  # the common answer, already as typed as it gets
                msg = decode_message(frame)
                if isinstance(msg, Event):
                    self._queue_event(msg)
                elif isinstance(msg, Response) and (msg.id == rid or msg.id is None):
                    break
        except (TimeoutError, RequestTimedOut):
            self._drop()
            raise RequestTimedOut(f"{method}: no answer in time", request_id=rid) from None
        except (OSError, TransportLost, ProtocolError) as exc:
            self._drop()
            raise TransportLost(f"{method}: connection lost ({exc})", request_id=rid) from None
        if msg.err is not None:
            if msg.id is None:
                self._drop()
            raise msg.err.to_exception()
        return msg.ok

    def next_event(self, timeout: float = 0.0) -> Event | None:
        """The next pushed event, waiting up to ``timeout`` seconds; None when none came.
        Raises TransportLost when the connection broke while waiting."""
        if self._events:
            return self._events.popleft()
        if self._sock is None:
            raise TransportLost("not connected")
        deadline = time.monotonic() + timeout
        try:
            while not self._events:
                frame = self._read_frame(deadline)
                msg = decode_message(frame)
                if isinstance(msg, Event):
                    self._queue_event(msg)
        except (TimeoutError, RequestTimedOut):
            return None
        except (OSError, TransportLost, ProtocolError) as exc:
            self._drop()
            raise TransportLost(f"event stream lost ({exc})") from None
        return self._events.popleft()

    def events(self, timeout: float) -> Iterator[Event]:
        """Yield pushed events until none arrives for ``timeout`` seconds."""
        while (ev := self.next_event(timeout)) is not None:
            yield ev

    def close(self) -> None:
        self._closed = True
        self._drop()

    def _queue_event(self, ev: Event) -> None:
        if len(self._events) >= MAX_QUEUED_EVENTS:
            self._events.popleft()
            self.dropped_events += 1
        self._events.append(ev)

    def _read_frame(self, deadline: float) -> dict[str, Any]:
        assert self._sock is not None
        while not self._frames:
            self._decoder.check()
            left = deadline - time.monotonic()
            if left <= 0:
                raise RequestTimedOut("deadline passed")
            self._sock.settimeout(left)
            data = self._sock.recv(262144)
            if not data:
                raise TransportLost("server closed the connection")
            self._frames.extend(self._decoder.feed(data))
        return self._frames.popleft()

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._decoder = FrameDecoder(self.max_frame)
        self._frames.clear()


class AsyncClient(_Common):
    """asyncio client; several calls may be outstanding on one connection (the server
    answers them in order)."""

    def __init__(self, path: str | os.PathLike[str], **kw: Any) -> None:
        super().__init__(path, **kw)
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._lock = asyncio.Lock()

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
                reader, writer = await asyncio.wait_for(
                    asyncio.open_unix_connection(self.path), self.connect_timeout)
            except (OSError, TimeoutError) as exc:
                raise ConnectFailed(f"cannot connect to {self.path}: {exc}",
                                    {"path": self.path}) from None
            try:
                welcome = await asyncio.wait_for(self._handshake(reader, writer),
                                                 self.connect_timeout)
            except (OSError, TimeoutError, TransportLost) as exc:
                writer.transport.abort()
                raise ConnectFailed(f"handshake with {self.path} failed: {exc}") from None
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
                   epoch: int | None = None, timeout: float | None = None) -> Any:
        """As :meth:`Client.call`."""
        await self.connect()
        writer = self._writer
        assert writer is not None
        rid, data = self._request(method, params, epoch)
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            writer.write(data)
            msg = await asyncio.wait_for(fut, self.timeout if timeout is None else timeout)
        except TimeoutError:
            self._abort(writer)
            raise RequestTimedOut(f"{method}: no answer in time", request_id=rid) from None
        except (OSError, TransportLost) as exc:
            self._abort(writer)
            raise TransportLost(f"{method}: connection lost ({exc})", request_id=rid) from None
        finally:
            self._pending.pop(rid, None)
        if msg.err is not None:
            raise msg.err.to_exception()
        return msg.ok

    async def next_event(self, timeout: float | None = None) -> Event | None:
        """The next pushed event or None after ``timeout``."""
        try:
            return await asyncio.wait_for(self._events.get(), timeout)
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

