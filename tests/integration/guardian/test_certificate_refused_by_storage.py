"""A backend whose storage refuses its recovery certificate says so, through the real
path: the backend's file writes are made to fail with RLIMIT_FSIZE (prlimit on the
running backend; Python ignores SIGXFSZ, so a write that would grow a file fails with
EFBIG, as on a full disk) after a restart invalidated the certificate.

Was: `tenure backend status` said `pending (… certifies again within 5 s once nothing
is changing)` for as long as the writes failed, and `tenure status` said nothing; a
crash meanwhile would have waited for `tenure backend recover`."""

from __future__ import annotations

import resource
import time

CONFIG = '[stacks.s.apps.calm]\ncommand = ["sleep", "100000"]\n'


def _recovery(cluster) -> dict:
    return cluster.cli("backend", "status", check=True).out["recovery"]


def test_a_certificate_the_storage_refuses_is_said(cluster):
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    cluster.wait(lambda: _recovery(cluster)["state"] == "ready", what="first certificate")
    backend = cluster.backend_pid()
    limits = resource.prlimit(backend, resource.RLIMIT_FSIZE)
    try:
        for _ in range(3):   # a certificate round between the restart and the limit
            cluster.cli("restart", "s/calm", check=True)   # invalidates the certificate
            resource.prlimit(backend, resource.RLIMIT_FSIZE, (1, limits[1]))
            if _recovery(cluster)["state"] == "pending":
                break
            resource.prlimit(backend, resource.RLIMIT_FSIZE, limits)
        cluster.wait(lambda: cluster.status().get("certificate_write_error") is not None,
                     timeout=15, what="a certificate round that failed")
        failing = cluster.status()["certificate_write_error"]
        assert failing["error"] and failing["since"] <= time.time(), failing
        text = cluster.cli_text("status")
        assert "the recovery certificate cannot be written since " in text, text
        rec = _recovery(cluster)
        assert rec["state"] == "unavailable", rec
        assert rec["reason"].startswith("the backend cannot write its recovery certificate "
                                        "(for "), rec
        assert "`tenure backend recover`" in rec["reason"], rec
        said = cluster.cli_text("backend", "status")
        assert "unavailable (the backend cannot write its recovery certificate" in said, said
    finally:
        resource.prlimit(backend, resource.RLIMIT_FSIZE, limits)
    cluster.wait(lambda: cluster.status().get("certificate_write_error") is None,
                 timeout=15, what="the certificate written again")
    cluster.wait(lambda: _recovery(cluster)["state"] == "ready", what="recovery ready")
    assert cluster.backend_pid() == backend
