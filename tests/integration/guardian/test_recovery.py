"""Crash recovery with real processes: a SIGKILLed backend is restored under a fresh epoch
from its recovery certificate, apps untouched; an app that changed while no backend ran
blocks recovery (`recovery_blocked`) until `tenure backend recover --force`."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from guardian.recovery import read_certificate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import (
    HandGuardian,
    backend_procs,
    config,
    guardian_status,
    owner_epoch,
    stop_cluster_guardian,
    wait_backend,
    wait_gone,
)


def _certify(cluster) -> None:
    """Until the backend published a certificate (it refuses while not quiet)."""
    cluster.wait(lambda: cluster.call("generation.certify")["published"], 30,
                 "a published recovery certificate")


def test_backend_sigkill_is_restored_under_a_fresh_epoch_from_the_certificate(cluster):
    cluster.up(config(sleepers=3))
    cluster.wait_ready(3)
    _certify(cluster)
    apps, epoch = cluster.pids(), owner_epoch(cluster)
    cert = read_certificate(str(cluster.layout.home / "backend" / "recovery.db"))
    assert cert["valid"] and cert["body"]["epoch"] == epoch

    dead = cluster.kill_backend()

    cluster.wait(lambda: cluster.backend_pid() != dead, 60, "a restored backend")
    st = wait_backend(cluster)["backend"]
    assert st["epoch"] == epoch + 1 and owner_epoch(cluster) == epoch + 1
    assert st["draining"] is False
    def recover() -> dict:
        return next(a for a in guardian_status(cluster)["recent"] if a["kind"] == "recover")
    # the new generation answers as soon as its API opens; the guardian then verifies it
    cluster.wait(lambda: recover()["phase"] in ("complete", "uncertain", "blocked"), 30,
                 "the recover activation to end")
    assert (recover()["phase"], recover()["outcome"], recover()["epoch"]) == \
        ("complete", "success", epoch + 1)
    assert guardian_status(cluster)["blocked"] is None
    procs = backend_procs(cluster.home)
    assert [p.pid for p in procs] == [st["pid"]]
    assert cluster.pids() == apps
    assert all(a["ready"] and a["restarts"] == 0 for a in cluster.apps().values())


def test_backend_status_shows_a_certificate_published_after_the_last_guardian_event(
        cluster):
    cluster.up(config(sleepers=1))
    cluster.wait_ready(1)
    _certify(cluster)
    cert = cluster.cli("backend", "status", check=True).out["certificate"]
    assert cert["valid"] is True and cert["age"] is not None and cert["age"] < 30


def test_recover_with_a_backend_serving_refuses_its_dry_run_too(cluster):
    """Was: --dry-run printed a plan (digest and all) that --digest then refused."""
    cluster.up(config(sleepers=1))
    cluster.wait_ready(1)
    for args in (("--dry-run",), ()):
        res = cluster.cli("backend", "recover", *args)
        assert res.code != 0 and res.out["error"]["code"] == "BAD_REQUEST", res
        assert "a backend generation is running; nothing to recover" in \
            res.out["error"]["msg"]


def test_app_changed_while_no_backend_ran_blocks_recovery_until_forced(cluster):
    cluster.up(config(sleepers=3))
    cluster.wait_ready(3)
    apps = cluster.pids()
    # the guardian's orderly stop certifies and retires its backend; apps stay
    stop_cluster_guardian(cluster, signal.SIGTERM)
    assert backend_procs(cluster.home) == []
    assert cluster.pids() == apps
    victim_key, (victim_pid, _) = sorted(apps.items())[0]
    os.kill(victim_pid, signal.SIGKILL)              # by hand, nobody supervising
    wait_gone(victim_pid)
    cluster.wait(lambda: victim_key not in cluster.pids(), 30, "the owner saw the exit")
    epoch = owner_epoch(cluster)

    hg = HandGuardian(cluster, tag="blocked")
    try:
        hg.wait_ready()
        st = guardian_status(cluster)
        assert st["blocked"] and st["blocked"]["code"] == "RECOVERY_BLOCKED", st
        assert "inventory" in st["blocked"]["reason"]
        act = st["recent"][0]
        assert (act["kind"], act["phase"], act["code"]) == \
            ("recover", "blocked", "RECOVERY_BLOCKED")
        assert backend_procs(cluster.home) == []
        assert owner_epoch(cluster) == epoch         # nothing was fenced
        assert cluster.cli("status").code != 0       # no backend answers
        shown = cluster.cli("backend", "status", check=True).out
        assert shown["blocked"]["code"] == "RECOVERY_BLOCKED"

        again = cluster.cli("backend", "recover")    # still not provable
        assert again.code != 0 and "RECOVERY_BLOCKED" in again.stderr + str(again.out)
        assert backend_procs(cluster.home) == []

        unreviewed = cluster.cli("backend", "recover", "--force")
        assert unreviewed.code != 0 and "--dry-run" in unreviewed.stderr + str(unreviewed.out)
        plan = cluster.cli("backend", "recover", "--dry-run", check=True).out
        assert plan["covered"] is False and "inventory" in plan["reason"]
        assert victim_key not in {a["launch_key"] for a in plan["adopt"]}
        assert len(plan["adopt"]) == 2
        stale = cluster.cli("backend", "recover", "--digest", "0" * 64)
        assert stale.code != 0 and "CONFLICT" in stale.stderr + str(stale.out)
        assert backend_procs(cluster.home) == []

        forced = cluster.cli("backend", "recover", "--digest", plan["digest"])

        assert forced.code == 0, (forced.out, forced.stderr)
        with cluster.guardian() as g:
            created = g.call("receipts", {"activation": forced.out["id"]})["receipts"][0]
        assert created["detail"]["forced"] is True
        evidence = Path(created["detail"]["evidence"])
        assert evidence.stat().st_mode & 0o777 == 0o600
        assert json.loads(evidence.read_text())["plan"]["digest"] == plan["digest"]
        assert forced.out["phase"] == "complete" and forced.out["kind"] == "recover"
        assert owner_epoch(cluster) == forced.out["epoch"] > epoch
        assert guardian_status(cluster)["blocked"] is None
        apps_after = cluster.wait_ready(3)            # the killed app runs again
        assert len(backend_procs(cluster.home)) == 1
        now = cluster.pids()
        for key, ident in apps.items():
            if key != victim_key:
                assert now[key] == ident              # the others untouched
        assert len(now) == 3 and victim_pid not in {p for p, _ in now.values()}
        assert all(a["pid"] for a in apps_after.values())
    finally:
        hg.stop()


def test_a_recovery_blocked_on_a_deleted_release_says_to_replace_the_release(cluster):
    """Was: 'recovery blocked ... run `tenure backend recover`' and, from that command,
    '`tenure backend recover --dry-run` shows what a forced recovery would adopt': neither
    helps while the selected release is gone; installing or selecting one does."""
    from test_handoff_support import _rmtree
    cluster.up(config(sleepers=1))
    cluster.wait_ready(1)
    _certify(cluster)
    rid = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    _rmtree(cluster.home / "runtime" / "releases" / rid)
    os.kill(cluster.backend_pid(), signal.SIGKILL)
    cluster.wait(lambda: bool(cluster.cli("backend", "status").out.get("blocked")), 60,
                 "the recovery blocked")
    want = (f"`tenure release install` release {rid[:12]} again, then `tenure backend "
            "recover`; or `tenure release select`")
    assert want in cluster.cli("backend", "status").out["blocked"]["next"]
    res = cluster.cli("backend", "recover")
    assert res.code != 0 and want in res.out["error"]["msg"], res
    assert "--dry-run" not in res.out["error"]["msg"], res
