"""A retired backend exits by itself even when its close would hang.

A long soak found one handoff in a thousand that paused 20 s: the incumbent did not exit
after its retire request, ignored SIGTERM (its handler only asked it to retire again)
and waited for SIGKILL. Here the incumbent is a release with a task that ignores its
cancellation; it must exit within its own close limit, say which task was still
running, and the handoff must complete with every app untouched."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_handoff_support as support
from test_handoff_support import PHASES, backend_procs, config, install

from backend.__main__ import EXIT_CLOSE_STUCK

candidates = support.candidates  # the session fixture of derived releases


def _upgrade(cluster: Any, release: str) -> dict[str, Any]:
    with cluster.guardian() as g:
        res: dict[str, Any] = g.call("upgrade", {"release": release})
    act = res["activation"]
    assert (act["phase"], act["outcome"]) == ("complete", "success"), res
    assert [r["phase"] for r in res["receipts"]] == PHASES
    return res


def test_a_retired_backend_whose_close_hangs_exits_by_itself(cluster, candidates):
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    original = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    stubborn = install(cluster, candidates.stubborn)
    into = _upgrade(cluster, stubborn)
    pids = cluster.pids()

    out = _upgrade(cluster, original)

    retired = next(r for r in out["receipts"] if r["phase"] == "retired")["detail"]
    # not -15 or -9: it ended itself, before the guardian's SIGTERM
    assert retired["returncode"] == EXIT_CLOSE_STUCK, retired
    text = cluster.backend_log(into["activation"]["id"])
    assert "closing did not finish" in text and "_stubborn_task" in text, text[-2000:]
    assert cluster.pids() == pids
    assert len(backend_procs(cluster.home)) == 1
