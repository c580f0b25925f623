"""protocol.startup: asyncio imported without ssl, and ssl still importable afterwards."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from protocol.startup import import_asyncio_without_tls
import_asyncio_without_tls()
assert "asyncio" in sys.modules and "ssl" not in sys.modules, sorted(sys.modules)
import asyncio, asyncio.sslproto
assert asyncio.sslproto.ssl is None  # asyncio without TLS support, for good
assert asyncio.run(asyncio.sleep(0, "ran")) == "ran"
import ssl  # unmarked: a later import (prometheus_client's exposition) still works
assert ssl.PROTOCOL_TLS_CLIENT
print("ok")
"""

ALREADY = """
import sys, asyncio
from protocol.startup import import_asyncio_without_tls
import_asyncio_without_tls()  # too late to matter: it must not break what is loaded
import asyncio.sslproto
assert asyncio.sslproto.ssl is sys.modules["ssl"] is not None
print("ok")
"""


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True).stdout.strip()


def test_asyncio_loads_without_ssl_and_ssl_loads_later():
    assert _run(PROBE) == "ok"


def test_a_second_call_or_a_late_one_changes_nothing():
    assert _run(ALREADY) == "ok"
