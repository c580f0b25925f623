"""Regression: right after a successful `tenure backend upgrade`, the recovery
certificate on disk was still the previous release's, and `backend status` said
`recovery: ready` all the same. A crash of the new generation in that window — the
likeliest moment for a new release to crash — was blocked ("the certificate was written
by another release than the selected one") and needed a forced recovery.

Now the handoff asks the verified generation for its certificate before it completes
(guardian.handoff.certify_new), and `backend status` no longer calls a certificate
ready that recovery would refuse. Real daemons, real upgrades, real SIGKILL.

Two derived candidates make the window deterministic: ``lazy`` never certifies on its
own (only when asked), ``mute`` never certifies at all."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.testing import force_rmtree

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import derive_release, install, wait_gone

NO_LOOP = """

async def certificate_loop(gen, *args, **kwargs):   # test candidate: never on its own
    await asyncio.Event().wait()
"""
NEVER = NO_LOOP + """

async def publish_certificate(gen):   # test candidate: never vouches
    return False
"""
CONFIG = '[stacks.s.apps.sl]\ncommand = ["sleep", "100000"]\nrestart = "always"\n'


@pytest.fixture(scope="module")
def lazy_and_mute(sealed_release: Path, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("certifying")
    lazy, mute = d / "lazy", d / "mute"
    derive_release(sealed_release, lazy, {"backend/certify.py": lambda t: t + NO_LOOP})
    derive_release(sealed_release, mute, {"backend/certify.py": lambda t: t + NEVER})
    yield lazy, mute
    force_rmtree(d)


def _upgrade(cluster: Any, release: str) -> dict[str, Any]:
    with cluster.guardian() as g:
        act: dict[str, Any] = g.call("upgrade", {"release": release})["activation"]
    assert (act["phase"], act["outcome"]) == ("complete", "success"), act
    return act


def test_a_backend_killed_right_after_an_upgrade_is_recovered_by_itself(
        cluster, lazy_and_mute):
    cluster.up(CONFIG)
    apps = cluster.wait_ready(1)
    new = install(cluster, lazy_and_mute[0])
    act = _upgrade(cluster, new)
    pid = cluster.backend_pid()
    os.kill(pid, signal.SIGKILL)           # at once: it never certified on its own
    wait_gone(pid)

    def recovered() -> bool:
        st = cluster.cli("backend", "status", check=True).out
        last = st["last_activation"]
        assert st["blocked"] is None, st["blocked"]
        return bool(last["kind"] == "recover" and last["phase"] == "complete")
    cluster.wait(recovered, 60, "the guardian recovering the new release by itself")
    backend = cluster.status()["backend"]
    assert backend["release"] == new and backend["pid"] != pid
    assert cluster.wait_ready(1)["s/sl/0"]["pid"] == apps["s/sl/0"]["pid"]
    with cluster.guardian() as g:
        receipts = g.call("receipts", {"activation": act["id"]})["receipts"]
    assert receipts[-1]["detail"].get("certified") is True, receipts[-1]


def test_backend_status_is_not_ready_while_the_certificate_is_the_previous_releases(
        cluster, lazy_and_mute):
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    cluster.wait(lambda: cluster.call("generation.certify")["published"], 30, "certified")
    st = cluster.cli("backend", "status", check=True).out
    assert st["recovery"]["state"] == "ready", st["recovery"]
    new = install(cluster, lazy_and_mute[1])
    act = _upgrade(cluster, new)

    st = cluster.cli("backend", "status", check=True).out
    cert = st["certificate"]
    assert cert["valid"] is False, cert
    assert cert["refused"] == ("the certificate was written by another release than the "
                               "selected one"), cert
    assert st["recovery"]["state"] == "pending", st["recovery"]
    text = cluster.cli_text("backend", "status")
    assert "recovery: ready" not in " ".join(text.split())
    with cluster.guardian() as g:
        receipts = g.call("receipts", {"activation": act["id"]})["receipts"]
    assert receipts[-1]["detail"].get("certified") is False, receipts[-1]
