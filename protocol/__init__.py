"""tenure's wire protocol: frames, messages, error codes, identity, safe sockets, RPC.

Pure I/O helpers and message types; no daemon logic lives here. Names are imported on
first use, so ``import protocol.errors`` (the CLI's fast path) loads nothing else.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

_EXPORTS = {
    "AsyncClient": "aclient", "Client": "client",
    "CODES": "codes", "Code": "codes", "CodeInfo": "codes",
    "PROTO": "envelope", "ErrorBody": "envelope", "Event": "envelope", "Hello": "envelope",
    "Request": "envelope", "Response": "envelope", "Welcome": "envelope",
    "decode_message": "envelope",
    "TenureError": "errors", "error_from_wire": "errors",
    "DEFAULT_MAX_FRAME": "framing", "FrameDecoder": "framing", "encode_frame": "framing",
    "Identity": "identity", "boot_id": "identity", "new_identity": "identity",
    "start_ticks": "identity",
    "Field": "schema", "Schema": "schema",
    "Call": "server", "Connection": "server", "Method": "server", "RpcServer": "server",
    "PeerCred": "sockets", "bind_unix": "sockets", "check_private_dir": "sockets",
    "ensure_private_dir": "sockets",
}

__all__ = sorted(_EXPORTS, key=lambda n: (not n.isupper(), n[0].islower(), n))


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'protocol' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
