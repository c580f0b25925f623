"""What the daemons do first: import asyncio without TLS.

asyncio imports ssl when it is imported, to offer TLS transports; ssl maps libssl and
builds its enums, ~1.3 MiB resident and ~7 ms of every start of every daemon, and no
tenure daemon speaks TLS (they speak msgpack over Unix sockets). Marked absent while
asyncio is imported, ssl leaves asyncio without TLS support for good; unmarked
afterwards, a later ``import ssl`` (prometheus_client's exposition module, when the
backend's metrics are enabled) loads it as usual.

The guardian's prewarm of a standby (guardian.backendproc.PREWARM) does the same inline:
it runs no code of a release before that release is verified.
"""

from __future__ import annotations

import sys

__all__ = ["import_asyncio_without_tls"]


def import_asyncio_without_tls() -> None:
    """Import asyncio with ssl marked absent (a no-op once asyncio or ssl is loaded)."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]
    try:
        import asyncio  # noqa: F401
    finally:
        if sys.modules.get("ssl", "") is None:
            del sys.modules["ssl"]
