"""backend.db damaged while the apps run: recovery blocks (nothing is stopped), and the
way out is to set it aside and give the config it applied to `tenure backend recover
--config`: the recovered generation starts from that config, which must be the one the
recovery certificate vouches for, and adopts every app as it runs."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import backend_procs, config, stop_cluster_guardian


def _damage(db: Path) -> None:
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    db.write_bytes(b"\x5a" * 8192)


def test_a_damaged_backend_db_is_set_aside_and_recovered_from_the_applied_config(
        cluster, tmp_path):
    applied = config(sleepers=3)
    cluster.up(applied)
    cluster.wait_ready(3)
    apps = cluster.pids()
    given = tmp_path / "given.toml"
    given.write_text(applied)
    serving = cluster.cli("backend", "recover", "--config", str(given))
    assert serving.code == 2 and "a backend generation runs" in str(serving.out)
    assert not Path(cluster.layout.queued_config).exists()   # nothing was queued
    stop_cluster_guardian(cluster, signal.SIGTERM)   # certifies, retires; apps stay
    db = cluster.layout.home / "backend" / "backend.db"
    _damage(db)

    blocked = cluster.cli("up")
    said = blocked.stderr + str(blocked.out)
    assert blocked.code != 0 and "RECOVERY_BLOCKED" in said and str(db) in said, said
    assert 'docs/recover.md, "A damaged backend.db"' in said, said
    assert cluster.pids() == apps and backend_procs(cluster.home) == []

    db.rename(db.with_name("backend.db.damaged"))
    Path(cluster.layout.queued_config).write_text("{}")   # another one waits
    waiting = cluster.cli("backend", "recover", "--config", str(given))
    assert waiting.code == 2 and "a config is queued already" in str(waiting.out)
    Path(cluster.layout.queued_config).unlink()
    bare = cluster.cli("backend", "recover")     # no config: the certificate wants one
    said = bare.stderr + str(bare.out)
    assert bare.code != 0 and "backend recover --config" in said, said
    # was: `once that is fixed, tenure backend recover` (the command just refused)
    assert "once that is fixed" not in said, said
    # was: the dry run said `needs no force`, and nothing more
    dry = cluster.cli_text("backend", "recover", "--dry-run", expect=0)
    assert "needs no force, but more than that: backend.db holds no applied config" in \
        dry, dry

    edited = tmp_path / "edited.toml"
    edited.write_text(config(sleepers=2))
    other = cluster.cli("backend", "recover", "--config", str(edited))
    said = other.stderr + str(other.out)
    assert other.code != 0 and "not the one the recovery certificate vouches for" in said
    assert f"{edited} was not kept for a later backend" in said, said
    assert not Path(cluster.layout.queued_config).exists()     # withdrawn
    assert cluster.pids() == apps and backend_procs(cluster.home) == []

    same = tmp_path / "applied.toml"
    same.write_text("# as it was applied\n" + applied)
    done = cluster.cli("backend", "recover", "--config", str(same))
    assert done.code == 0, (done.out, done.stderr)
    cluster.wait_ready(3)
    assert cluster.pids() == apps                     # adopted, none restarted
    status = cluster.cli("status", check=True).out
    assert status["queued_config"] is None
    assert len(status["apps"]) == 3

    # the config is backend.db's again: the next recovery needs nothing given
    stop_cluster_guardian(cluster, signal.SIGTERM)
    cluster.cli("up", check=True)
    cluster.wait_ready(3)
    assert cluster.pids() == apps


def test_a_forced_recovery_of_a_damaged_backend_db_adopts_by_the_config_given(
        cluster, tmp_path):
    """The certificate no longer covers the world (an app died while no backend ran):
    the reviewed forced recovery adopts the others by the config given, and the dead
    one starts again."""
    applied = config(sleepers=3)
    cluster.up(applied)
    cluster.wait_ready(3)
    apps = cluster.pids()
    stop_cluster_guardian(cluster, signal.SIGTERM)
    db = cluster.layout.home / "backend" / "backend.db"
    _damage(db)
    victim, (pid, _) = sorted(apps.items())[0]
    os.kill(pid, signal.SIGKILL)
    cluster.wait(lambda: victim not in cluster.pids(), 30, "the owner saw the exit")
    assert cluster.cli("up").code != 0
    db.rename(db.with_name("backend.db.damaged"))

    plan = cluster.cli("backend", "recover", "--dry-run", check=True).out
    assert plan["covered"] is False and len(plan["adopt"]) == 2
    given = tmp_path / "applied.toml"
    given.write_text(applied)
    done = cluster.cli("backend", "recover", "--digest", plan["digest"],
                       "--config", str(given))
    assert done.code == 0, (done.out, done.stderr)
    cluster.wait_ready(3)
    now = cluster.pids()
    assert {k: v for k, v in now.items() if k in apps} == \
        {k: v for k, v in apps.items() if k != victim}       # the others adopted
    assert len(now) == 3 and pid not in {p for p, _ in now.values()}


def test_with_nothing_running_a_home_without_backend_db_starts_afresh(cluster):
    """Nothing to adopt: no config is asked for, and the one `up` gives is applied."""
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    assert cluster.down().code == 0                  # the apps are stopped
    db = cluster.layout.home / "backend" / "backend.db"
    _damage(db)
    db.rename(db.with_name("backend.db.damaged"))
    cluster.up(config(sleepers=3))
    cluster.wait_ready(3)
    assert len(cluster.cli("status", check=True).out["apps"]) == 3


def test_a_damaged_operation_row_blocks_the_recovery_at_once_naming_it(cluster):
    """An operation's stacks that are no JSON made the starting generation die of a
    JSONDecodeError: a crash, retried seven times before the recovery blocked, with no
    file named. It is STATE_CORRUPT now, and blocks at the first attempt."""
    import sqlite3
    cluster.up(config(sleepers=1))
    cluster.wait_ready(1)
    apps = cluster.pids()
    stop_cluster_guardian(cluster, signal.SIGTERM)
    db = sqlite3.connect(cluster.layout.home / "backend" / "backend.db", timeout=10)
    try:
        db.execute("UPDATE operations SET stacks = '{not json', outcome = NULL")
        db.commit()
    finally:
        db.close()

    before = set(cluster.layout.logs.glob("backend-*.log"))
    blocked = cluster.cli("up")
    assert blocked.code != 0 and blocked.out["error"]["code"] == "RECOVERY_BLOCKED"
    said = blocked.out["error"]["msg"]
    assert "STATE_CORRUPT: backend.db: operation 'op-" in said and "cannot be read" in said
    assert 'docs/recover.md, "A damaged backend.db"' in said, said
    tried = set(cluster.layout.logs.glob("backend-*.log")) - before
    assert len(tried) == 1, sorted(tried)          # one generation tried, none retried
    assert cluster.pids() == apps and backend_procs(cluster.home) == []


NOTIFIER = ('[stacks.n.apps.notifier]\ncommand = ["sh", "-c", "systemd-notify --ready; '
            'exec sleep infinity"]\nready = { kind = "notify", timeout = 2 }\n')


def test_an_app_that_said_ready_is_adopted_ready_without_backend_db(cluster, tmp_path):
    """An app whose readiness is READY=1, adopted with backend.db set aside, was held to
    a new ready timeout it could never meet (it had said READY once): restarted by the
    recovery that promised to adopt every app as it runs. The owner says which live
    launches sent READY=1."""
    applied = config(sleepers=1) + NOTIFIER
    cluster.up(applied)
    cluster.wait_ready(2)
    apps = cluster.pids()
    with cluster.owner() as owner:
        inventory = owner.call("inventory")["launches"]
    said = {r["app"]: r.get("ready_notified") for r in inventory}
    assert said == {"notifier": True, "sleeper": None}, said
    stop_cluster_guardian(cluster, signal.SIGTERM)
    db = cluster.layout.home / "backend" / "backend.db"
    _damage(db)
    assert cluster.cli("up").code != 0              # the guardian: recovery blocked
    db.rename(db.with_name("backend.db.damaged"))
    given = tmp_path / "applied.toml"
    given.write_text(applied)
    done = cluster.cli("backend", "recover", "--config", str(given))
    assert done.code == 0, (done.out, done.stderr)
    cluster.wait_ready(2)
    time.sleep(3)                                    # past the ready timeout
    row = cluster.apps()["n/notifier/0"]
    assert row["state"] == "ready" and cluster.pids() == apps, (row, cluster.pids(), apps)
