"""Regression: a guardian that died (or stopped) in the middle of a backend upgrade left
the incumbent draining forever: every command, `status` included, answered
SHUTTING_DOWN, with no next generation coming. Now the incumbent ends a handoff its
guardian left (backend.drainwatch): it resumes serving — after a checkpoint only once it
withdrew it — or, when a candidate's fence landed, stands down; and `status` answers
while a handoff drains it.

Real daemons, a real upgrade, real SIGKILL / SIGSTOP of the guardian."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from backend.testing import in_thread
from protocol.errors import ShuttingDown, TenureError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_handoff_support as support
from test_handoff_support import (
    HandGuardian,
    backend_procs,
    guardian_status,
    install,
    owner_epoch,
    stop_cluster_guardian,
    wait_gone,
)

candidates = support.candidates  # the session fixture of derived releases

STOP_S = 6   # the app ignores SIGTERM: a restart of it takes this long (then SIGKILL)
CONFIG = ('[stacks.s.apps.sl]\ncommand = ["sleep", "100000"]\nrestart = "always"\n\n'
          '[stacks.s.apps.slow]\ncommand = ["sh", "-c", '
          "\"trap '' TERM; while :; do sleep 1; done\"]\n"
          f'restart = "always"\nstop = {{ timeout = {STOP_S} }}\n')


def _upgrade(cluster: Any, release: str) -> tuple[threading.Thread, dict[str, Any]]:
    def go() -> Any:
        with cluster.guardian() as g:
            return g.call("upgrade", {"release": release})
    return in_thread(go)


def _generation(cluster: Any) -> dict[str, Any]:
    st: dict[str, Any] = cluster.call("generation.status")   # answered while draining
    return st


def _slow_restart_draining(cluster: Any, new: str) -> tuple[Any, Any]:
    """Restart the app that takes STOP_S to stop, start an upgrade: its drain waits for
    that step. Returns once the incumbent drains (threads of the restart, the upgrade)."""
    restart = in_thread(lambda: cluster.cli("restart", "s/slow"))
    cluster.wait(lambda: cluster.apps()["s/slow/0"]["state"] == "stopping", 20, "stopping")
    upgrade = _upgrade(cluster, new)
    cluster.wait(lambda: _generation(cluster)["draining"], 60, "the incumbent draining")
    return restart, upgrade


def _handoff_events(cluster: Any) -> list[dict[str, Any]]:
    lines = cluster.cli_text("--json", "events", "--kind", "handoff").splitlines()
    return [json.loads(line)["data"] for line in lines if line.strip()]


def _last_upgrade(cluster: Any) -> str:
    """The newest upgrade activation, read from state.db (no guardian may run)."""
    db = sqlite3.connect(f"file:{cluster.layout.runtime / 'state.db'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT id FROM activations WHERE kind = 'upgrade' "
                         "ORDER BY created_at DESC LIMIT 1").fetchone()
    finally:
        db.close()
    return str(row[0])


def test_guardian_killed_mid_drain_the_backend_serves_again_by_itself(cluster, candidates):
    cluster.up(CONFIG)
    before = cluster.wait_ready(2)
    new = install(cluster, candidates.good)
    guardian = int(cluster.cli("backend", "status", check=True).out["guardian"]["pid"])
    incumbent, epoch = cluster.backend_pid(), owner_epoch(cluster)
    restart, upgrade = _slow_restart_draining(cluster, new)

    st = cluster.status()      # read-only status is answered while a handoff drains
    assert st["backend"]["draining"] is True

    os.kill(guardian, signal.SIGKILL)
    wait_gone(guardian)
    t0 = time.monotonic()
    cluster.wait(lambda: not cluster.status()["backend"]["draining"], 5,
                 "the incumbent serving again")
    assert time.monotonic() - t0 < STOP_S   # not only once the slow step ended
    text = cluster.cli_text("status")
    assert "guardian: NOT RUNNING" in text
    assert f"resuming as the incumbent: the guardian (pid {guardian}) that asked for the " \
           "drain is gone" in cluster.backend_log()
    # it acts again: the step that was running ends, and a new change is made
    restart[0].join(60)
    upgrade[0].join(60)
    assert isinstance(upgrade[1].get("err"), TenureError), upgrade[1]
    apps = cluster.wait_ready(2, timeout=30)
    assert apps["s/slow/0"]["pid"] != before["s/slow/0"]["pid"]
    assert cluster.cli("restart", "s/sl").ok
    assert cluster.wait_ready(2)["s/sl/0"]["pid"] != before["s/sl/0"]["pid"]
    assert (cluster.backend_pid(), owner_epoch(cluster)) == (incumbent, epoch)
    resumed = [e for e in _handoff_events(cluster) if e.get("phase") == "resumed"]
    assert resumed and resumed[-1].get("by") == "itself", resumed

    cluster.up()   # a guardian again: it adopts the backend and ends the upgrade
    act = next(a for a in guardian_status(cluster)["recent"] if a["kind"] == "upgrade")
    assert act["phase"] == "aborted", act
    # the candidate the dead guardian had standing by ends once it sees no guardian
    cluster.wait(lambda: [p.pid for p in backend_procs(cluster.home)] == [incumbent], 30,
                 f"only the incumbent left: {[p.cmdline() for p in backend_procs(cluster.home)]}")


def test_guardian_stopped_mid_drain_the_backend_resumes_at_the_deadline(cluster, candidates):
    """SIGSTOP: the guardian lives but never comes back in time. Deadline of a drain:
    twice its timeout (here the guardian's test-only 4 s)."""
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    new = install(cluster, candidates.good)
    incumbent, epoch = cluster.backend_pid(), owner_epoch(cluster)
    stop_cluster_guardian(cluster, signal.SIGKILL)   # its backend keeps running
    cluster.env["TENURE_GUARDIAN_DEADLINE"] = "4"
    hg = HandGuardian(cluster, tag="stopped")
    try:
        hg.wait_ready()
        restart, upgrade = _slow_restart_draining(cluster, new)
        os.kill(hg.pid, signal.SIGSTOP)
        began = time.monotonic()
        try:
            cluster.wait(lambda: not cluster.status()["backend"]["draining"], 20,
                         "the incumbent serving again")
            assert time.monotonic() - began < 12
            assert "resuming as the incumbent: the guardian neither finished nor ended " \
                   "the handoff in time" in cluster.backend_log()
            assert _generation(cluster)["handoff"] == "serving"
        finally:
            os.kill(hg.pid, signal.SIGCONT)
        upgrade[0].join(120)
        restart[0].join(60)
        act = upgrade[1]["ok"]["activation"]
        assert (act["phase"], act["code"]) == ("aborted", "HANDOFF_FAILED"), act
        assert (cluster.backend_pid(), owner_epoch(cluster)) == (incumbent, epoch)
        assert cluster.wait_ready(2, timeout=30)
        assert cluster.cli("restart", "s/sl").ok
    finally:
        hg.stop()


def _faulty_upgrade(cluster: Any, candidates: Any, phase: str) -> dict[str, Any]:
    """An upgrade whose guardian is SIGKILLed right after ``phase`` (TENURE_GUARDIAN_FAULT);
    no guardian runs afterwards. What was there before, for comparison."""
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    new = install(cluster, candidates.good)
    was = {"apps": cluster.pids(), "epoch": owner_epoch(cluster),
           "incumbent": cluster.backend_pid(), "new": new}
    stop_cluster_guardian(cluster, signal.SIGKILL)
    faulty = HandGuardian(cluster, fault=phase, tag=f"fault-{phase}")
    try:
        faulty.wait_ready()
        with pytest.raises(TenureError), cluster.guardian() as g:
            g.call("upgrade", {"release": new})
        assert faulty.wait_killed() == -signal.SIGKILL
    finally:
        faulty.stop()
    was["activation"] = _last_upgrade(cluster)
    return was


def test_guardian_killed_after_the_checkpoint_the_backend_withdraws_it_and_resumes(
        cluster, candidates):
    was = _faulty_upgrade(cluster, candidates, "checkpointed")
    checkpoint = Path(cluster.layout.checkpoint_file(was["activation"]))
    cluster.wait(lambda: not cluster.status()["backend"]["draining"], 10,
                 "the incumbent serving again")
    assert not checkpoint.exists()
    assert Path(f"{checkpoint}.withdrawn").exists()
    log = cluster.backend_log()
    assert f"withdrew checkpoint {checkpoint}" in log and "resuming as the incumbent" in log
    assert owner_epoch(cluster) == was["epoch"]
    assert cluster.cli("restart", "s/sl").ok    # it acts again, under its own epoch
    assert cluster.pids()["s/sl/0/2"]

    healthy = HandGuardian(cluster, tag="after")
    try:
        healthy.wait_ready()
        act = next(a for a in guardian_status(cluster)["recent"] if a["kind"] == "upgrade")
        assert act["phase"] == "aborted", act
        assert cluster.backend_pid() == was["incumbent"]
    finally:
        healthy.stop()


def test_guardian_killed_after_the_fence_the_fenced_backend_stands_down(
        cluster, candidates):
    was = _faulty_upgrade(cluster, candidates, "fenced")
    assert owner_epoch(cluster) == was["epoch"] + 1   # the candidate's grant is held
    cluster.wait(lambda: _generation(cluster)["handoff"] == "stood-down", 10,
                 "the fenced incumbent standing down")
    gen = _generation(cluster)
    assert gen["fenced"] is True and gen["epoch"] == was["epoch"]
    st = cluster.status()                   # it still says what it knows
    assert st["backend"]["draining"] is True
    with pytest.raises(ShuttingDown):       # but changes nothing
        cluster.call("restart", {"target": "s/sl"})
    assert "standing down for good" in cluster.backend_log()
    assert Path(cluster.layout.checkpoint_file(was["activation"])).exists()
    assert cluster.pids() == was["apps"]

    healthy = HandGuardian(cluster, tag="after")   # retires it, brings the candidate home
    try:
        healthy.wait_ready()
        act = next(a for a in guardian_status(cluster)["recent"] if a["kind"] == "upgrade")
        assert act["phase"] == "complete", act
        backend = cluster.status()["backend"]
        assert (backend["epoch"], backend["release"]) == (was["epoch"] + 1, was["new"])
        assert backend["pid"] != was["incumbent"]
        assert cluster.pids() == was["apps"]
    finally:
        healthy.stop()
