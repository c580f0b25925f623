"""The message envelope: handshake, requests, responses and events.

Every frame is a map with a type tag ``t``. Decoding is strict about declared fields and
ignores unknown extra keys, so a newer peer may add fields without breaking older ones.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import BadRequest, TenureError, error_from_wire
from .identity import Identity
from .schema import Field, Schema, check_int, check_name
from .values import Value

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = [
    "MAX_ID",
    "PROTO",
    "ROLES",
    "ErrorBody",
    "Event",
    "Hello",
    "Message",
    "Request",
    "Response",
    "Welcome",
    "check_capabilities",
    "decode_message",
]

PROTO = 1
ROLES = ("admin", "viewer")
MAX_ID = 2**63 - 1


def _check_caps(v: Any) -> str | None:
    for k, ver in v.items():
        if not isinstance(k, str) or not k:
            return "must map capability names to versions"
        if isinstance(ver, bool) or not isinstance(ver, int) or ver < 1:
            return f"has a bad version for {k!r} (positive integers only)"
    return None


def _check_role(v: Any) -> str | None:
    return None if v in ROLES else f"must be one of {', '.join(ROLES)}"


def check_capabilities(caps: dict[str, int]) -> dict[str, int]:
    """Validate a capability map for construction-time use; raises BadRequest."""
    problem = _check_caps(caps)
    if problem:
        raise BadRequest(f"capabilities {problem}")
    return dict(caps)


class Hello(Value):
    """Client → server, first frame. ``want`` maps capability names to exact versions;
    ``grant`` (optional) is a signed grant the connection presents (the owner binds the
    connection to it: protocol.md, "Grants")."""

    __slots__ = ("client", "grant", "proto", "role", "want")
    SCHEMA = Schema(
        Field("proto", int),
        Field("role", str, check=_check_role),
        Field("want", dict, required=False, default={}, check=_check_caps),
        Field("client", str, required=False, default=""),
        Field("grant", dict, required=False),
    )

    def __init__(self, role: str = "admin", want: dict[str, int] | None = None,
                 proto: int = PROTO, client: str = "",
                 grant: dict[str, Any] | None = None) -> None:
        self.role, self.want, self.proto, self.client = role, dict(want or {}), proto, client
        self.grant = grant

    def to_wire(self) -> dict[str, Any]:
        d = {"t": "hello", "proto": self.proto, "role": self.role,
             "want": dict(self.want), "client": self.client}
        if self.grant is not None:
            d["grant"] = self.grant
        return d


class Welcome(Value):
    """Server → client answer to a hello: who the server is and what it offers."""

    __slots__ = ("capabilities", "identity", "proto", "role")
    SCHEMA = Schema(
        Field("proto", int),
        Field("identity", dict),
        Field("capabilities", dict, check=_check_caps),
        Field("role", str, check=_check_role),
    )

    def __init__(self, identity: Identity, capabilities: dict[str, int], role: str,
                 proto: int = PROTO) -> None:
        self.identity, self.capabilities, self.role, self.proto = (
            identity, capabilities, role, proto)

    def to_wire(self) -> dict[str, Any]:
        return {"t": "welcome", "proto": self.proto, "identity": self.identity.to_wire(),
                "capabilities": dict(self.capabilities), "role": self.role}


class Request(Value):
    __slots__ = ("epoch", "id", "m", "p")
    SCHEMA = Schema(
        Field("id", int, check=check_int(0, MAX_ID)),
        Field("m", str, check=check_name(128)),
        Field("p", dict, required=False, default={}),
        Field("epoch", int, required=False, check=check_int(0, MAX_ID)),
    )

    def __init__(self, id: int, m: str, p: dict[str, Any] | None = None,
                 epoch: int | None = None) -> None:
        self.id, self.m, self.p, self.epoch = id, m, {} if p is None else p, epoch

    def to_wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {"t": "req", "id": self.id, "m": self.m, "p": self.p}
        if self.epoch is not None:
            d["epoch"] = self.epoch
        return d


class ErrorBody(Value):
    __slots__ = ("code", "data", "msg")
    SCHEMA = Schema(
        Field("code", str, check=check_name(64)),
        Field("msg", str, required=False, default=""),
        Field("data", dict, required=False, default={}),
    )

    def __init__(self, code: str, msg: str = "", data: dict[str, Any] | None = None) -> None:
        self.code, self.msg, self.data = code, msg, {} if data is None else data

    @classmethod
    def from_error(cls, exc: TenureError) -> ErrorBody:
        return cls(exc.code_str, exc.msg, exc.data)

    def to_exception(self) -> TenureError:
        return error_from_wire(self.code, self.msg, self.data)

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "msg": self.msg, "data": self.data}


class Response(Value):
    """``id`` is None only for an error about a frame that had no readable request id."""

    __slots__ = ("err", "id", "ok")
    SCHEMA = Schema(
        Field("id", int, required=False, check=check_int(0, MAX_ID)),
        Field("err", dict, required=False),
    )

    def __init__(self, id: int | None, ok: Any = None, err: ErrorBody | None = None) -> None:
        self.id, self.ok, self.err = id, ok, err

    def to_wire(self) -> dict[str, Any]:
        if self.err is not None:
            return {"t": "res", "id": self.id, "err": self.err.to_wire()}
        return {"t": "res", "id": self.id, "ok": self.ok}


class Event(Value):
    __slots__ = ("cursor", "e", "stream")
    SCHEMA = Schema(
        Field("stream", str, check=check_name(128)),
        Field("cursor", int, check=check_int(0, MAX_ID)),
    )

    def __init__(self, stream: str, cursor: int, e: Any = None) -> None:
        self.stream, self.cursor, self.e = stream, cursor, e

    def to_wire(self) -> dict[str, Any]:
        return {"t": "evt", "stream": self.stream, "cursor": self.cursor, "e": self.e}


Message = Hello | Welcome | Request | Response | Event


def _hello(d: dict[str, Any]) -> Hello:
    v = Hello.SCHEMA.validate(d, "hello")
    return Hello(role=v["role"], want=v["want"], proto=v["proto"], client=v["client"],
                 grant=v["grant"])


def _welcome(d: dict[str, Any]) -> Welcome:
    v = Welcome.SCHEMA.validate(d, "welcome")
    ident = Identity.from_wire(v["identity"], "welcome.identity")
    return Welcome(ident, v["capabilities"], v["role"], v["proto"])


def _is_uint(v: Any) -> bool:
    return type(v) is int and 0 <= v <= MAX_ID


def _request(d: dict[str, Any]) -> Request:
    # The hot path of every server: check the common well-formed shape inline and leave
    # the precise complaint about anything else to the schema.
    rid, m, p, epoch = d.get("id"), d.get("m"), d.get("p", {}), d.get("epoch")
    if (_is_uint(rid) and type(m) is str and 0 < len(m) <= 128 and "/" not in m
            and m.isprintable() and type(p) is dict and (epoch is None or _is_uint(epoch))):
        return Request(rid, m, p, epoch)  # type: ignore[arg-type]
    v = Request.SCHEMA.validate(d, "req")
    return Request(v["id"], v["m"], v["p"], v["epoch"])


def _response(d: dict[str, Any]) -> Response:
    v = Response.SCHEMA.validate(d, "res")
    if v["err"] is not None:
        e = ErrorBody.SCHEMA.validate(v["err"], "res.err")
        return Response(v["id"], err=ErrorBody(e["code"], e["msg"], e["data"]))
    if "ok" not in d:
        raise BadRequest("res needs either ok or err")
    if v["id"] is None:
        raise BadRequest("res.id is required for a successful answer")
    return Response(v["id"], ok=d["ok"])


def _event(d: dict[str, Any]) -> Event:
    v = Event.SCHEMA.validate(d, "evt")
    return Event(v["stream"], v["cursor"], d.get("e"))


_DECODERS: dict[str, Callable[[dict[str, Any]], Message]] = {
    "hello": _hello, "welcome": _welcome, "req": _request, "res": _response, "evt": _event}


def decode_message(obj: dict[str, Any]) -> Message:
    """Type and validate one decoded frame. Raises BadRequest for an unknown or bad shape."""
    t = obj.get("t")
    decoder = _DECODERS.get(t) if isinstance(t, str) else None
    if decoder is None:
        raise BadRequest(f"unknown message type {t!r}")
    return decoder(obj)
