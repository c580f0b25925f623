"""tenure's wire protocol: frames, messages, error codes, identity, safe sockets, RPC.

Pure I/O helpers and message types; no daemon logic lives here.
"""

from .client import AsyncClient, Client
from .codes import CODES, Code, CodeInfo
from .envelope import PROTO, ErrorBody, Event, Hello, Request, Response, Welcome, decode_message
from .errors import TenureError, error_from_wire
from .framing import DEFAULT_MAX_FRAME, FrameDecoder, encode_frame
from .identity import Identity, boot_id, new_identity, start_ticks
from .schema import Field, Schema
from .server import Call, Connection, Method, RpcServer
from .sockets import PeerCred, bind_unix, check_private_dir, ensure_private_dir

__all__ = [
    "CODES",
    "DEFAULT_MAX_FRAME",
    "PROTO",
    "AsyncClient",
    "Call",
    "Client",
    "Code",
    "CodeInfo",
    "Connection",
    "ErrorBody",
    "Event",
    "Field",
    "FrameDecoder",
    "Hello",
    "Identity",
    "Method",
    "PeerCred",
    "Request",
    "Response",
    "RpcServer",
    "Schema",
    "TenureError",
    "Welcome",
    "bind_unix",
    "boot_id",
    "check_private_dir",
    "decode_message",
    "encode_frame",
    "ensure_private_dir",
    "error_from_wire",
    "new_identity",
    "start_ticks",
]
