"""protocol.startup: asyncio imported without ssl, and ssl still importable afterwards;
hashlib without OpenSSL (no libcrypto mapped), the same digests."""

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


BUILTIN = """
import sys
from protocol.startup import use_builtin_hashes
use_builtin_hashes()
import hashlib, hmac
assert hashlib.sha256(b"abc").hexdigest() == (
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
assert hmac.compare_digest(b"a", b"a") and "openssl" not in repr(hashlib.sha256)
maps = open("/proc/self/maps").read()
assert "libcrypto" not in maps, [l for l in maps.splitlines() if "libcrypto" in l]
print("ok")
"""

LATE = """
import hashlib
from protocol.startup import use_builtin_hashes
use_builtin_hashes()  # hashlib has OpenSSL's functions already: they stay
import sys
assert sys.modules["_hashlib"] is not None and "openssl" in repr(hashlib.sha256)
print("ok")
"""


def test_hashes_without_openssl_map_no_libcrypto():
    assert _run(BUILTIN) == "ok"


def test_a_late_call_keeps_what_hashlib_has():
    assert _run(LATE) == "ok"


MSGSPEC = """
import sys
from protocol.startup import import_msgspec_as_released
import_msgspec_as_released()
assert "msgspec" in sys.modules, sorted(sys.modules)
assert "typing_extensions" not in sys.modules and "inspect" not in sys.modules
import msgspec
class S(msgspec.Struct):
    a: "int"
assert msgspec.convert({"a": 1}, S) == S(1)   # type hints resolved by typing's own
import typing_extensions   # unmarked: installed here (a development dependency), it loads
assert typing_extensions.get_type_hints
print("ok")
"""


def test_msgspec_loads_without_typing_extensions_and_it_loads_later():
    assert _run(MSGSPEC) == "ok"


# What each daemon imports to serve (as its preflight imports it), and the standard
# modules that its start must not load: each costs resident memory and start time in
# a process that needs it only on a rare path (tests fail when a module-level import
# brings one back).
SERVING = {
    "owner": ("import owner.daemon, owner.service, owner.supervise",
              ("shutil", "uuid", "secrets", "zoneinfo")),
    "guardian": ("from guardian import boot, cold, daemon, handoff, service",
                 ("shutil", "uuid", "secrets", "tomllib", "zoneinfo")),
    "backend": ("import backend.activation, backend.api, backend.generation",
                ("shutil", "secrets", "zoneinfo")),   # uuid: msgspec imports it
}

ARGS = """
import sys
from protocol.startup import daemon_arguments, import_asyncio_without_tls
import_asyncio_without_tls()
{imports}
ap = daemon_arguments("python -m {name}", "tenure {name}")
ap.add_argument("--home", help="state directory " * 12)
assert ap.parse_args(["--home", "h"]).home == "h"
loaded = sorted(m for m in {absent!r} if m in sys.modules)
assert not loaded, loaded
assert max(len(line) for line in ap.format_help().splitlines()) <= 78
print("ok")
"""


def test_each_daemon_serves_without_the_modules_of_rare_paths():
    for name, (imports, absent) in SERVING.items():
        assert _run(ARGS.format(name=name, imports=imports, absent=absent)) == "ok", name


def test_a_daemons_help_still_prints():
    for name in ("owner", "guardian", "backend"):
        out = subprocess.run([sys.executable, "-m", name, "--help"], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.startswith(f"usage: python -m {name}"), \
            (name, out.stderr)
