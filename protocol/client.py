"""RPC clients, blocking and asyncio, with the same rules.

- Every (re)connection checks the socket file (owner, mode, not a symlink), the server's
  peer credentials against the identity it claims, and the pinned instance.
- A request already sent when the connection breaks raises ``TransportLost`` carrying its
  request id: the outcome is unknown and it is never replayed. The next call reconnects.
- A server with another instance than the pinned one raises ``OwnerChanged``; the client
  never adopts it silently (call ``unpin`` to accept a new instance deliberately).
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import time
from collections import deque
from collections.abc import Iterator, Mapping

from .envelope import Event, Hello, Response, Welcome, decode_message
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

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["Client"]

MAX_QUEUED_EVENTS = 100_000


def connect_data(path: str, exc: BaseException) -> dict[str, object]:
    """CONNECT_FAILED's data: the path, and ``listening: False`` when nothing listens
    there (no socket file, or the connect was refused), so that a caller can say the
    daemon is not running without reading the message."""
    gone = isinstance(exc, (FileNotFoundError, ConnectionRefusedError))
    return {"path": path, **({"listening": False} if gone else {})}


class _Common:
    """Settings and handshake checks shared by both clients."""

    def __init__(self, path: str | os.PathLike[str], *, role: str = "admin",
                 want: Mapping[str, int] | None = None, expect_instance: str | None = None,
                 pin: bool = True, timeout: float = 30.0, connect_timeout: float = 5.0,
                 max_frame: int = DEFAULT_MAX_FRAME, owners: tuple[int, ...] | None = None,
                 allow_group: bool = False, name: str = "",
                 grant: Mapping[str, Any] | None = None) -> None:
        self.path = check_socket_path(path)
        self.hello = Hello(role=role, want=dict(want or {}), client=name,
                           grant=None if grant is None else dict(grant))
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
            raise ConnectFailed(f"no socket at {self.path}",
                                {"path": self.path, "listening": False}) from None

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
        req: dict[str, Any] = {"t": "req", "id": rid, "m": method, "p": dict(params or {})}
        if epoch is not None:
            req["epoch"] = epoch
        return rid, encode_frame(req, self.max_frame)


class Client(_Common):
    """Blocking client: one connection, one request at a time."""

    def __init__(self, path: str | os.PathLike[str], **kw: Any) -> None:
        super().__init__(path, **kw)
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder(self.max_frame)
        self._frames: deque[dict[str, Any]] = deque()
        self._events: deque[Event] = deque()
        self._poller: select.poll | None = None

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
                                connect_data(self.path, exc)) from None
        except BaseException:
            self._drop()
            sock.close()
            raise

    def _idle_connection_alive(self) -> bool:
        """Before sending, notice a server that went away while we were idle (nothing is
        in flight, so reconnecting replays nothing). Pending events are kept."""
        assert self._sock is not None
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self._sock, select.POLLIN)
        poller = self._poller
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
            raise TransportLost(f"{method}: connection lost ({exc})", {"path": str(self.path)},
                                request_id=rid) from None
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

    def use_grant(self, grant: Mapping[str, Any]) -> None:
        """Present the signed ``grant`` on every connection from now on (it goes in the
        hello): the current connection is closed, the next call reconnects with it."""
        self.hello = self.hello.replace(grant=dict(grant))
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
        self._poller = None
        self._decoder = FrameDecoder(self.max_frame)
        self._frames.clear()
