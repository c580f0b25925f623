"""A backend generation admits no change before it told the guardian READY, through the
real path: a candidate that hangs between opening its API socket and READY (a release
whose start hangs there) answers a `tenure stop` with SHUTTING_DOWN (`starting`,
nothing changed), and the command line asks again until the generation that serves
after the rollback takes it.

Was: the hung candidate applied the stop, and the rollback's restore of the incumbent
from its checkpoint started the app again: the operator's stop was undone, with exit 0
said for it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from backend.testing import in_thread

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import _rmtree, derive_release, install

CONFIG = '[stacks.s.apps.a]\ncommand = ["sleep", "infinity"]\n'
READY = '    print(json.dumps({"ready": True,'


def _hang_before_ready(text: str) -> str:
    assert READY in text
    return text.replace(READY, '    await __import__("asyncio").sleep(3600)\n' + READY, 1)


def test_a_candidate_not_ready_admits_no_change(cluster, sealed_release, tmp_path):
    cluster.env["TENURE_GUARDIAN_DEADLINE"] = "6"
    derive_release(sealed_release, tmp_path / "hangs",
                   {"backend/__main__.py": _hang_before_ready})
    try:
        cluster.up(CONFIG)
        cluster.wait_ready(1)
        incumbent = cluster.backend_pid()
        rid = install(cluster, tmp_path / "hangs")
        upgrade = in_thread(lambda: cluster.cli("backend", "upgrade", rid))
        cluster.wait(lambda: cluster.status()["backend"]["pid"] != incumbent, 20,
                     "the candidate serving the API")
        began = time.monotonic()
        stop = cluster.cli("stop", "s/a")
        assert stop.code == 0, stop
        assert "is starting and not ready yet; nothing was changed; waiting for it to " \
            "be ready" in stop.stderr, stop
        assert time.monotonic() - began > 2   # it waited for the rollback
        upgrade[0].join(60)
        act = upgrade[1]["ok"].out["activation"]
        assert act["phase"] == "rolled_back", act
        time.sleep(2)   # the restore is done: nothing starts it again
        app = cluster.apps()["s/a/0"]
        assert app["state"] == "stopped" and app["restarts"] == 0, app
    finally:
        _rmtree(tmp_path / "hangs")
