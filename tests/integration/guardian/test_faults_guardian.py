"""Fault matrix: the guardian is SIGKILLed right after an upgrade reaches each phase (the
test-only TENURE_GUARDIAN_FAULT hook), then started again without the hook. It must
finish the activation (complete, or aborted/rolled back), leave exactly one backend
alive that holds the owner's epoch, leave every application alone, and say in the
receipts what happened.

The hook also fires for the activations of a guardian's own start, so the faulty
guardian is started beside a living backend (the first guardian is SIGKILLed, its
backend keeps running and is adopted without any activation)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from protocol.errors import TenureError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_handoff_support as support
from test_handoff_support import (
    FINAL_OK,
    PHASES,
    HandGuardian,
    backend_procs,
    config,
    guardian_status,
    install,
    owner_epoch,
    stop_cluster_guardian,
)

candidates = support.candidates  # the session fixture of derived releases

# "created" is not a fault point: the hook runs in Coordinator.advance, and an activation
# is created by StateStore.create_activation, which never calls it.
FAULT_PHASES = PHASES[1:]
BEFORE_FENCE = {"checked", "admitted", "draining", "checkpointed"}


@pytest.mark.parametrize("phase", FAULT_PHASES)
def test_guardian_killed_at_phase_then_restarted_finishes_the_handoff(cluster, candidates,
                                                                      phase):
    cluster.up(config(sleepers=3))
    cluster.wait_ready(3)
    new = install(cluster, candidates.good)
    old = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    apps = cluster.pids()
    epoch = owner_epoch(cluster)
    incumbent = cluster.backend_pid()
    stop_cluster_guardian(cluster, signal.SIGKILL)    # its backend keeps running
    assert [p.pid for p in backend_procs(cluster.home)] == [incumbent]

    faulty = HandGuardian(cluster, fault=phase, tag=f"fault-{phase}")
    healthy: HandGuardian | None = None
    try:
        faulty.wait_ready()
        assert guardian_status(cluster)["backend"]["pid"] == incumbent
        with pytest.raises(TenureError), cluster.guardian() as g:
            g.call("upgrade", {"release": new})   # the guardian dies under the call
        assert faulty.wait_killed() == -signal.SIGKILL
        assert f"killing the guardian after phase {phase}" in faulty.err_path.read_text()

        healthy = HandGuardian(cluster, tag=f"after-{phase}")
        healthy.wait_ready()

        st = guardian_status(cluster)
        act = next(a for a in st["recent"] if a["kind"] == "upgrade")
        with cluster.guardian() as g:
            receipts = [r["phase"] for r in g.call("receipts",
                                                   {"activation": act["id"]})["receipts"]]
        assert act["phase"] in FINAL_OK, (act, receipts)
        assert phase in receipts and receipts[0] == "created"
        assert receipts[-1] == act["phase"]
        if phase in BEFORE_FENCE:       # never fenced: the incumbent resumes
            assert act["phase"] == "aborted" and receipts[-2] == phase, receipts
            want_release, want_epoch = old, epoch
        else:                           # fenced: the candidate is brought home
            assert act["phase"] == "complete", (act, receipts)
            assert receipts == PHASES, receipts
            want_release, want_epoch = new, epoch + 1
        # no recovery or rollback activation was needed beside it
        assert [a["kind"] for a in st["recent"]].count("upgrade") == 1
        assert st["blocked"] is None
        # exactly one backend alive, holding the owner's epoch, serving
        procs = backend_procs(cluster.home)
        assert len(procs) == 1, [p.cmdline() for p in procs]
        assert owner_epoch(cluster) == want_epoch
        backend = cluster.status()["backend"]
        assert backend["pid"] == procs[0].pid
        assert (backend["epoch"], backend["release"]) == (want_epoch, want_release)
        assert backend["draining"] is False
        if phase in BEFORE_FENCE:
            assert backend["pid"] == incumbent
        sel = cluster.cli("backend", "status", check=True).out["selector"]
        assert sel["current"] == want_release
        assert cluster.pids() == apps                 # applications untouched
        # the dead guardian's installation lease is recovered: commands run again
        with cluster.guardian() as g:
            again = g.call("upgrade", {"release": old, "check": True})["activation"]
        assert again["outcome"] == "check-only", again
    finally:
        for hg in (faulty, healthy):
            if hg is not None:
                hg.stop()
