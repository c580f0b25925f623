"""What the running daemons keep mapped: no tenure process loads the cryptography package
(Ed25519 is the libcrypto hashlib already maps: protocol.ed25519) or TLS (asyncio is
imported without ssl: protocol.startup; the backend loads ssl only for its metrics
exporter), and the backend, which needs no Ed25519, does not map libcrypto at all (its
hashes are CPython's own: protocol.startup). Each cost megabytes resident in every
process (bench/suite.py's RSS row) and milliseconds of each start."""

from __future__ import annotations

import os

from protocol.procfs import mapped_files


def _mapped(pid: int) -> set[str]:
    return {os.path.basename(path) for path in mapped_files(pid) or ()}


def test_the_daemons_map_no_tls_and_no_cryptography(cluster):
    cluster.up("[stacks.s.apps.a]\ncommand = [\"sleep\", \"100000\"]\n")
    cluster.wait_ready(1)
    with cluster.owner() as o:
        owner = o.call("status")["owner"]["pid"]
    with cluster.guardian() as g:
        guardian = g.call("status")["guardian"]["pid"]
        release = g.call("status")["selector"]["current"]
    backend = cluster.status()["backend"]["pid"]
    mapped = {"owner": _mapped(owner), "guardian": _mapped(guardian),
              "backend": _mapped(backend)}
    # and a generation started as a standby (an upgrade's prewarmed interpreter)
    cluster.cli("backend", "upgrade", release, timeout=300, check=True)
    standby = cluster.status()["backend"]["pid"]
    assert standby != backend
    mapped["standby"] = _mapped(standby)
    for name, libs in mapped.items():
        libcrypto = any(lib.startswith("libcrypto.so") for lib in libs)
        assert libcrypto is (name in ("owner", "guardian")), (name, libs)
        crypto = [lib for lib in libs if "cffi" in lib or lib.startswith("_rust")]
        assert not crypto, (name, crypto)
        assert not [lib for lib in libs if lib.startswith(("libssl", "_ssl"))], (name, libs)
