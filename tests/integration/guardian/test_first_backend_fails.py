"""`tenure up` on a fresh home whose release's backend cannot start: it returns at its
--timeout (it waited ~60 s longer before, the guardian's retries inside one call), and
both it and `tenure backend status` say why the backend ended, not only that it did."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_handoff_support as support
from test_handoff_support import config

from backend import queuefile
from backend.testing import Cluster

candidates = support.candidates  # the session fixture of derived releases

WHY = "exited before it was ready (exit status 3): candidate refuses to run"


def test_up_returns_at_its_timeout_and_says_why_the_backend_ended(
        short_home: Path, candidates: Any) -> None:
    c = Cluster(short_home, candidates.preflight_fails)   # exits 3 as it is imported
    try:
        t0 = time.monotonic()
        res = c.cli("up", "--timeout", "4", "--release", str(c.release), "--config",
                    str(c.write_config(config(sleepers=1))), timeout=120)
        took = time.monotonic() - t0
        assert res.code == 3, res
        err = res.out["error"]
        assert err["code"] == "BACKEND_UNAVAILABLE"
        # the guardian's streak of failed starts, with the last one's cause
        assert " within 4 s; recovery is failing: attempt " in err["msg"], err["msg"]
        assert " ended HANDOFF_FAILED: backend " + WHY in err["msg"], err["msg"]
        assert "; the guardian tries again " in err["msg"], err["msg"]
        # the daemons run: the config waits for a backend that can start
        rid = err["data"]["request_id"]
        assert err["msg"].endswith(f"; the config stays queued as request {rid}: the "
                                   "backend applies it once one runs (`tenure status` "
                                   "says whether it waits)"), err["msg"]
        assert queuefile.pending(c.layout.queued_config) == {rid}
        assert took < 30, f"up took {took:.1f} s with --timeout 4"
        st = c.cli("backend", "status", timeout=60).out
        assert WHY in st["recent"][0]["error"]
    finally:
        c.down()
        assert not c.leftovers()
