"""An asyncio RPC server on a Unix socket.

Per connection: peer credentials are checked on accept, the first frame must be a
``hello``, then requests are served strictly one after another (a connection is a
serial channel; concurrency comes from several connections). Events are pushed on any
connection that subscribed to their stream. While draining, requests of methods not
marked ``while_draining`` get ``SHUTTING_DOWN``; admitted ones run to completion.

What peers can make the server hold is bounded per role, the role a peer's credentials
allow deciding which budget a connection uses from its accept on (so viewers, possibly
another uid, can never crowd out admins): at most ``max_pending`` connections in their
handshake (each with at most a 64 KiB hello, for ``handshake_timeout``) and at most
``max_connections[role]`` after it; ``TOO_MANY_CONNECTIONS`` beyond. A frame, once begun,
must be complete within ``frame_timeout`` (``FRAME_TIMEOUT``). A viewer may send frames
of at most ``viewer_max_frame`` bytes, so viewers together hold at most
``max_connections["viewer"] * viewer_max_frame`` of requests. A client that does not read
its answers is read no further once they back up (:data:`_DRAIN_ABOVE`, plus the one
answer queued last); answers waiting to be queued are results, encoded only when their
turn comes, and at most :data:`LARGE_PER_CONNECTION` of them are of methods with large
answers (``Method.large``).

Out of file descriptors, the server stops accepting for a moment and tries again, saying
so at most once a minute (:mod:`protocol.acceptor`); it serves again by itself once
descriptors are free.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from .acceptor import Acceptor
from .envelope import PROTO, ROLES, ErrorBody, Event, Hello, Request, Response, Welcome
from .envelope import decode_message as _decode
from .errors import (
    BadFrame,
    BadRequest,
    CapabilityMissing,
    FrameTimeout,
    Internal,
    ShuttingDown,
    TenureError,
    TooManyConnections,
    Unauthorized,
    UnknownMethod,
    UnsupportedProtocol,
)
from .framing import DEFAULT_MAX_FRAME, REQUEST_MAX_ITEMS, FrameDecoder, encode_frame
from .identity import Identity
from .schema import Schema
from .seldom import Seldom
from .sockets import Authorizer, PeerCred, bind_unix, peer_credentials, same_uid_or_root
from .storage import storage_failure
from .timing import Timings

__all__ = ["Call", "Connection", "Method", "RpcServer"]

log = logging.getLogger("tenure.rpc")

Handler = Callable[["Call"], Awaitable[Any]]
HELLO_MAX_FRAME = 64 * 1024
VIEWER_MAX_FRAME = 64 * 1024
"""A viewer only reads: its requests are small, and it may be another uid."""
DEFAULT_MAX_CONNECTIONS: Mapping[str, int] = {"admin": 64, "viewer": 32}
DEFAULT_MAX_PENDING = 64
MAX_INFLIGHT: Mapping[str, int] = {"admin": 1024, "viewer": 64}
"""Requests of one connection being handled at once, by its role; more wait to be read.
An admin's may each last long (at the owner, the backend has a stop in flight for every
app it stops at once, each until its process has ended: at 64, a stack of 80 slow
stoppers held every place, and the heartbeat sent after them timed out); a viewer only
reads."""
DEFAULT_FRAME_TIMEOUT = 10.0
IDLE_AFTER = 10.0
"""A connection with no request for this long, nothing in flight and no subscription is
idle: at its role's connection limit, the one idle longest is closed to make room for a
new one (idle same-uid clients held every admin place, and the daemons' own links, which
are never idle that long, were refused)."""
REFUSAL_LINGER = 1.0
"""How long a connection refused at accept is kept so the client can read why."""
_RANK = {role: i for i, role in enumerate(ROLES)}  # admin 0 < viewer 1
_DRAIN_ABOVE = 256 * 1024
LARGE_PER_CONNECTION = 4
"""Requests of a method with large answers (``Method.large``) of one connection being
made or waiting to be queued at once; the others wait for their turn, holding only their
request. The backend keeps at most 4 ``logs.read`` outstanding at the owner."""


@dataclass(frozen=True)
class Method:
    """One entry of a dispatch table: handler, parameter schema, least role needed."""

    handler: Handler
    params: Schema | None = None
    role: str = "admin"
    while_draining: bool = False
    large: bool = False   # answers of up to a frame (a page of logs): LARGE_PER_CONNECTION


@dataclass
class Call:
    """What a handler gets: validated params plus who asked and on which connection."""

    method: str
    params: dict[str, Any]
    epoch: int | None
    request_id: int
    conn: Connection

    @property
    def peer(self) -> PeerCred:
        return self.conn.peer


@dataclass(eq=False)
class Connection:
    peer: PeerCred
    writer: asyncio.StreamWriter
    max_buffer: int
    role: str = "viewer"
    hello: Hello | None = None
    streams: set[str] = field(default_factory=set)
    grant: Any = None  # what the server's hello hook bound the connection to
    sending: asyncio.Lock = field(default_factory=asyncio.Lock)   # answers, one at a time
    in_flight: int = 0        # its requests read and not answered yet
    last_request: float = 0.0   # loop time of its hello or last request
    evicted: bool = False     # closed to make room: its place is given back already
    # turns of requests with large answers: taken before the handler runs, given back
    # once its answer is queued, so a client that does not read holds few such answers
    large_turns: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(LARGE_PER_CONNECTION))

    def answered(self, _task: asyncio.Task[None]) -> None:
        self.in_flight -= 1

    def subscribe(self, stream: str) -> None:
        self.streams.add(stream)

    def unsubscribe(self, stream: str) -> None:
        self.streams.discard(stream)

    def send_event(self, stream: str, cursor: int, e: Any) -> bool:
        """Queue one event frame; a subscriber too slow to keep up is disconnected
        (it resumes from its cursor). Returns False when the connection is gone."""
        if self.writer.is_closing():
            return False
        if self.writer.transport.get_write_buffer_size() > self.max_buffer:
            log.warning("dropping slow subscriber pid=%s on %s", self.peer.pid, stream)
            self.writer.transport.abort()
            return False
        self.writer.write(encode_frame(Event(stream, cursor, e).to_wire()))
        return True


class RpcServer:
    """Serve ``methods`` on ``path``. ``start`` binds; ``close`` unbinds and disconnects."""

    def __init__(self, path: str, identity: Identity, capabilities: Mapping[str, int],
                 methods: Mapping[str, Method], *, authorize: Authorizer = same_uid_or_root,
                 max_frame: int = DEFAULT_MAX_FRAME, handshake_timeout: float = 10.0,
                 max_buffer: int = 8 * 1024 * 1024,
                 max_connections: Mapping[str, int] = DEFAULT_MAX_CONNECTIONS,
                 max_pending: int = DEFAULT_MAX_PENDING,
                 frame_timeout: float = DEFAULT_FRAME_TIMEOUT,
                 idle_after: float = IDLE_AFTER,
                 viewer_max_frame: int = VIEWER_MAX_FRAME,
                 on_hello: Callable[[Connection], None] | None = None,
                 timings: Timings | None = None) -> None:
        self.path = path
        self.timings = timings  # per-method latency of the requests served, if kept
        self.identity = identity
        self.capabilities = dict(capabilities)
        self.methods: dict[str, Method] = {"ping": Method(_ping, role="viewer",
                                                          while_draining=True)}
        self.methods.update(methods)
        self.authorize = authorize
        self.max_frame = max_frame
        self.handshake_timeout = handshake_timeout
        self.max_buffer = max_buffer
        self.max_connections = {role: max_connections.get(role, 0) for role in ROLES}
        self.max_pending = max_pending
        self.frame_timeout = frame_timeout
        self.idle_after = idle_after
        self.viewer_max_frame = viewer_max_frame
        self.refused = 0  # connections refused for a limit, since start
        self._said: dict[str, Seldom] = {}   # protocol abuse, by code: a line a minute
        self.on_hello = on_hello  # may bind the connection or refuse it (TenureError)
        self.draining = False
        # while set, why the server does not admit changes yet: requests of admin
        # methods not marked ``while_draining`` get SHUTTING_DOWN with it, ``starting``
        # in its data (a backend generation between its socket and its READY)
        self.starting: str | None = None
        self.connections: set[Connection] = set()
        self._pending = dict.fromkeys(ROLES, 0)  # by the role the peer may take
        self._by_role = dict.fromkeys(ROLES, 0)
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight = 0
        self._open = 0   # requests read and not answered yet, whether begun or not
        self._idle = asyncio.Event()
        self._idle.set()
        self._acceptor: Acceptor | None = None
        self._inode: int | None = None

    async def start(self) -> None:
        """Bind and listen. Raises PathTooLong, UnsafePath, AlreadyRunning or OSError
        (``listen`` failed)."""
        sock = bind_unix(self.path)
        self._inode = os.stat(self.path).st_ino
        self._acceptor = Acceptor(sock, self.path, self._connected)
        try:
            self._acceptor.start()
        except OSError:
            self._acceptor.close()
            self._acceptor = None
            raise

    def begin_drain(self) -> None:
        self.draining = True

    def disown(self) -> None:
        """The socket's path is no longer ours (our home was lost): close leaves
        whatever is there now alone."""
        self._inode = None

    def end_drain(self) -> None:
        self.draining = False

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def open_requests(self) -> int:
        """Requests read and not yet answered, on every connection: those whose handler
        has not begun yet too (a burst read at once)."""
        return self._open

    def _closed_request(self, _task: asyncio.Task[None]) -> None:
        self._open -= 1

    async def wait_idle(self) -> None:
        """Wait until no admitted request is running."""
        await self._idle.wait()

    def publish(self, stream: str, cursor: int, e: Any) -> int:
        """Push an event to every connection subscribed to ``stream``; returns how many."""
        return sum(1 for c in list(self.connections)
                   if stream in c.streams and c.send_event(stream, cursor, e))

    async def close(self) -> None:
        """Stop listening, drop every connection, remove our socket file (only ours)."""
        if self._acceptor is not None:
            self._acceptor.close()
            self._acceptor = None
        for conn in list(self.connections):
            conn.writer.transport.abort()
        if self._tasks:
            # aborted transports end their connection tasks; cancel only stragglers
            # (e.g. a handler still awaiting something) so close never hangs
            _done, stragglers = await asyncio.wait(list(self._tasks), timeout=2.0)
            for task in stragglers:
                task.cancel()
            if stragglers:
                await asyncio.wait(stragglers, timeout=2.0)
        try:
            if self._inode is not None and os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except FileNotFoundError:
            pass

    # -- one connection -------------------------------------------------------------

    def _connected(self, sock: socket.socket) -> None:
        """Serve a connection just accepted, on a task of its own that close waits for."""
        task = asyncio.create_task(self._open_streams(sock))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _open_streams(self, sock: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(sock=sock)
        except OSError:
            sock.close()  # gone before we could serve it: there is no one to answer
            return
        await self._accept(reader, writer)

    async def _accept(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        conn = Connection(peer_credentials(writer.get_extra_info("socket")), writer,
                          self.max_buffer)
        try:
            allowed = self.authorize(conn.peer)
            if allowed is None:
                await self._refuse(conn, reader, self._refused(
                    conn, f"uid {conn.peer.uid} may not use this socket"))
                return
            if self._pending[allowed] >= self.max_pending:
                await self._refuse(conn, reader, TooManyConnections(
                    f"{self.max_pending} {allowed} connections are in their handshake; "
                    "retry later", {"role": allowed, "limit": self.max_pending}))
                return
            self.connections.add(conn)
            await self._serve(conn, reader, allowed)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except TenureError as exc:
            if not isinstance(exc, Unauthorized):   # said with its reason already
                self._say(conn, str(exc.code))
            with suppress(ConnectionError):
                await self._send(conn, Response(None, err=ErrorBody.from_error(exc)))
        finally:
            self.connections.discard(conn)
            if conn.hello is not None and not conn.evicted:
                self._by_role[conn.role] -= 1
            writer.close()  # flushes a final error frame, then closes

    async def _refuse(self, conn: Connection, reader: asyncio.StreamReader,
                      exc: TenureError) -> None:
        """Answer ``exc`` before reading anything, then read (and drop) what the client
        sends for a moment: closing with its hello unread would reset the connection and
        the client would never see why."""
        if isinstance(exc, TooManyConnections):
            self.refused += 1
            self._say(conn, str(exc.code))
        conn.writer.write(encode_frame(Response(None, err=ErrorBody.from_error(exc))
                                       .to_wire()))
        with suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(REFUSAL_LINGER):
                got = 0
                while got < HELLO_MAX_FRAME and (data := await reader.read(65536)):
                    got += len(data)

    async def _serve(self, conn: Connection, reader: asyncio.StreamReader,
                     allowed: str) -> None:
        # The hello is read before it is judged, so every refusal reaches the client as
        # an answer (closing with its hello unread would reset the connection).
        decoder = FrameDecoder(min(self.max_frame, HELLO_MAX_FRAME), REQUEST_MAX_ITEMS)
        pending: list[dict[str, Any]] = []
        self._pending[allowed] += 1
        try:
            async with asyncio.timeout(self.handshake_timeout):
                first = await self._read(reader, decoder, pending)
        except TimeoutError:
            self._say(conn, "HANDSHAKE_TIMEOUT")
            return
        finally:
            self._pending[allowed] -= 1
        if first is None:
            return
        await self._handshake(conn, first, allowed)
        decoder.max_frame = self.max_frame if conn.role == "admin" else \
            min(self.max_frame, self.viewer_max_frame)
        # Requests of one connection run concurrently (answers carry their id): a slow
        # one — a stop that waits out its grace period — must not hold up the rest.
        inflight: set[asyncio.Task[None]] = set()
        try:
            while True:
                if conn.writer.transport.get_write_buffer_size() > _DRAIN_ABOVE:
                    await conn.writer.drain()   # answers back up: read no more meanwhile
                frame = await self._read(reader, decoder, pending, self.frame_timeout)
                if frame is None:
                    return
                conn.last_request = asyncio.get_running_loop().time()
                if len(inflight) >= MAX_INFLIGHT[conn.role]:
                    await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                task = asyncio.create_task(self._handle(conn, frame))
                inflight.add(task)
                conn.in_flight += 1
                task.add_done_callback(inflight.discard)
                task.add_done_callback(conn.answered)
                self._open += 1
                task.add_done_callback(self._closed_request)
        finally:
            if inflight:  # admitted requests finish, as they did one at a time
                await asyncio.gather(*inflight, return_exceptions=True)

    async def _read(self, reader: asyncio.StreamReader, decoder: FrameDecoder,
                    pending: list[dict[str, Any]], frame_timeout: float | None = None,
                    ) -> dict[str, Any] | None:
        """The next frame; None at end of file. Between frames a connection may idle as
        long as it likes; a frame begun must be complete within ``frame_timeout``.
        Raises BadFrame, FrameTimeout."""
        loop = asyncio.get_running_loop()
        begun: float | None = None
        while not pending:
            decoder.check()
            if frame_timeout is None or not decoder.buffered:
                data = await reader.read(65536)
            else:
                begun = loop.time() if begun is None else begun
                data = await self._read_within(reader, begun + frame_timeout - loop.time())
            if not data:
                return None
            pending.extend(decoder.feed(data))  # BadFrame propagates: answer and close
        return pending.pop(0)

    async def _read_within(self, reader: asyncio.StreamReader, left: float) -> bytes:
        try:
            async with asyncio.timeout(max(left, 0.0)):
                return await reader.read(65536)
        except TimeoutError:
            raise FrameTimeout(f"a frame was not completed within {self.frame_timeout} s",
                               {"timeout": self.frame_timeout}) from None

    async def _handshake(self, conn: Connection, frame: dict[str, Any], allowed: str) -> None:
        msg = _decode(frame)
        if not isinstance(msg, Hello):
            raise BadRequest("the first message must be hello")
        if msg.proto != PROTO:
            raise UnsupportedProtocol(f"server speaks protocol {PROTO}, client {msg.proto}",
                                      {"server": PROTO, "client": msg.proto})
        if ROLES.index(msg.role) < ROLES.index(allowed):
            raise self._refused(conn, f"uid {conn.peer.uid} may connect as {allowed}, "
                                f"not {msg.role}")
        missing = {k: v for k, v in msg.want.items() if self.capabilities.get(k) != v}
        if missing:
            raise CapabilityMissing(
                f"server lacks {', '.join(f'{k}@{v}' for k, v in sorted(missing.items()))}",
                {"missing": missing, "offered": self.capabilities})
        limit = self.max_connections[msg.role]
        if self._by_role[msg.role] >= limit and not self._make_room(msg.role, limit):
            self.refused += 1
            raise TooManyConnections(f"{limit} {msg.role} connections are open; retry later",
                                     {"role": msg.role, "limit": limit})
        conn.role, conn.hello = msg.role, msg
        conn.last_request = asyncio.get_running_loop().time()
        self._by_role[msg.role] += 1
        if self.on_hello is not None:
            self.on_hello(conn)
        welcome = Welcome(self.identity, self.capabilities, msg.role)
        conn.writer.write(encode_frame(welcome.to_wire(), self.max_frame))
        await conn.writer.drain()

    def _make_room(self, role: str, limit: int) -> bool:
        """Close the connection of ``role`` idle longest, if one is idle (IDLE_AFTER);
        its place is free at once. Returns whether one was."""
        since = asyncio.get_running_loop().time() - self.idle_after
        idle = [c for c in self.connections if c.hello is not None and c.role == role
                and not c.evicted and not c.streams and c.in_flight == 0
                and c.last_request <= since]
        if not idle:
            return False
        victim = min(idle, key=lambda c: c.last_request)
        self._say(victim, "IDLE_CLOSED")
        victim.evicted = True
        self._by_role[role] -= 1
        err = TooManyConnections(f"closed after {self.idle_after:g} s idle: {limit} {role} "
                                 "connections were open and another one came",
                                 {"role": role, "limit": limit})
        victim.writer.write(encode_frame(Response(None, err=ErrorBody.from_error(err))
                                         .to_wire()))
        victim.writer.close()   # flushes the answer, then closes; its task ends on EOF
        return True

    async def _handle(self, conn: Connection, frame: dict[str, Any]) -> None:
        name = frame.get("m")
        method = self.methods.get(name) if isinstance(name, str) else None
        if method is not None and method.large:
            async with conn.large_turns:
                await self._answer(conn, frame)
        else:
            await self._answer(conn, frame)

    async def _answer(self, conn: Connection, frame: dict[str, Any]) -> None:
        rid = frame.get("id") if frame.get("t") == "req" else None
        rid = rid if isinstance(rid, int) and not isinstance(rid, bool) and rid >= 0 else None
        try:
            req = _decode(frame)
            if not isinstance(req, Request):
                raise BadRequest(f"expected req, got {frame.get('t')!r}")
            result = await self._dispatch(conn, req)
            response = Response(req.id, ok=result)
        except TenureError as exc:
            response = Response(rid, err=ErrorBody.from_error(exc))
        await self._send(conn, response)

    async def _dispatch(self, conn: Connection, req: Request) -> Any:
        method = self.methods.get(req.m)
        if method is None:
            raise UnknownMethod(f"no method {req.m!r}", {"method": req.m})
        if _RANK[conn.role] > _RANK[method.role]:
            raise self._refused(conn, f"{req.m} needs the {method.role} role")
        if self.draining and not method.while_draining:
            raise ShuttingDown("server is draining; retry against the next one")
        if self.starting is not None and method.role == "admin" and not method.while_draining:
            raise ShuttingDown(self.starting, {"starting": True, "method": req.m})
        t0 = perf_counter()
        params = method.params.validate(req.p) if method.params else dict(req.p)
        self._in_flight += 1
        self._idle.clear()
        try:
            return await method.handler(Call(req.m, params, req.epoch, req.id, conn))
        except TenureError:
            raise
        except Exception as exc:
            stored = storage_failure(exc, req.m)
            if stored is not None:   # a full or failing disk, not a defect
                log.error("method %s: %s", req.m, stored.msg)
                raise stored from None
            log.exception("method %s failed", req.m)
            raise Internal(f"{req.m} failed: {type(exc).__name__}") from None
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()
            if self.timings is not None:  # served methods only: a bounded label set
                self.timings.observe(req.m, perf_counter() - t0)

    def _say(self, conn: Connection, code: str) -> None:
        """Log a connection ended or refused by the protocol (``code``): each code at
        once, then at most once a minute with how many since, naming the last peer. Never
        what it sent: its words may be anything."""
        n = self._said.setdefault(code, Seldom()).due()
        if n:
            p = conn.peer
            log.warning("%s: connection of uid=%d pid=%d on %s ended (%d since the last "
                        "such line)", code, p.uid, p.pid, self.path, n)

    def _refused(self, conn: Connection, why: str) -> Unauthorized:
        """Every refusal is logged: who (uid, gid, pid) tried what on which socket."""
        p = conn.peer
        log.warning("refused uid=%d gid=%d pid=%d on %s: %s", p.uid, p.gid, p.pid,
                    self.path, why)
        return Unauthorized(why)

    async def _send(self, conn: Connection, response: Response) -> None:
        """Queue ``response``: one answer at a time, each only once the transport holds at
        most :data:`_DRAIN_ABOVE` bytes of answers, and encoded only then, so an answer
        waiting for a client slow to read is its result alone, never its frame too (a
        client that never read made the owner hold every answer twice, hundreds of MB).
        A client gone is quiet: nothing is encoded or sent."""
        try:
            async with conn.sending:
                if conn.writer.transport.get_write_buffer_size() > _DRAIN_ABOVE:
                    await conn.writer.drain()  # only a slow reader makes us wait
                if conn.writer.is_closing():
                    return   # gone: the answers it asked for go nowhere
                try:
                    data = encode_frame(response.to_wire(), self.max_frame)
                except (BadFrame, BadRequest) as exc:
                    data = encode_frame(_cut_short(response, exc).to_wire())
                conn.writer.write(data)
        except ConnectionError:   # it went away: the answers it asked for go nowhere
            return


ERROR_MSG_MAX = 4096
"""Characters of an error's words sent when the whole error does not fit a frame."""


def _cut_short(response: Response, exc: Exception) -> Response:
    """What is sent for ``response`` when it cannot be (``exc``): an error keeps its
    code, with its words cut and its data left out (a launch failure that quoted a
    megabyte argv[0] four times was answered INTERNAL, and its caller could not tell a
    refusal from a defect); any other answer is INTERNAL, logged."""
    if response.err is not None:
        msg = response.err.msg
        cut = msg if len(msg) <= ERROR_MSG_MAX else f"{msg[:ERROR_MSG_MAX]}… (cut short)"
        return Response(response.id, err=ErrorBody(response.err.code, cut, {}))
    log.error("answer to request %s not encodable: %s", response.id, exc)
    err = Internal(f"answer not encodable: {type(exc).__name__}")
    return Response(response.id, err=ErrorBody.from_error(err))


async def _ping(call: Call) -> dict[str, Any]:
    return {}
