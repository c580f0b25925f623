"""State files that are not the daemons' own to use, found by `tenure up` on real daemons
in a short home: each is refused with UNSAFE_PATH naming the path, the file is left as
it is, and a failed `up` leaves nothing running (docs/state.md, "Rules that hold for
every path"). Was: the daemons' logs were followed through a symlink and its target
chmod'ed; a symlinked supervisor-state.json left a guardian running that logged a
traceback every write; an unsafe backend.db or recovery.db was retried for a minute; a
journal.db open to others was chmod'ed back without a word."""

from __future__ import annotations

import os
import stat
import time

import pytest

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'


def _up_then_down(cluster) -> None:
    cluster.up(ONE)
    assert cluster.down().code == 0


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.parametrize("module", ["owner", "guardian"])
def test_a_daemon_log_that_is_a_symlink_starts_nothing(cluster, module) -> None:
    _up_then_down(cluster)
    log = cluster.layout.logs / f"{module}.log"
    target = cluster.home / "someone-elses-file"
    target.write_bytes(b"theirs\n")
    os.chmod(target, 0o644)
    log.unlink()
    log.symlink_to(target)
    up = cluster.cli("up", "--timeout", "60")
    assert up.code != 0 and up.out["error"]["code"] == "UNSAFE_PATH", up
    assert up.out["error"]["msg"].startswith(f"{log} is a symlink"), up
    assert target.read_bytes() == b"theirs\n" and _mode(target) == 0o644
    assert cluster.leftovers() == []
    assert not os.path.exists(cluster.layout.owner_sock)
    log.unlink()
    cluster.up()


def test_a_daemon_log_open_to_others_starts_nothing(cluster) -> None:
    _up_then_down(cluster)
    log = cluster.layout.logs / "owner.log"
    os.chmod(log, 0o644)
    up = cluster.cli("up", "--timeout", "60")
    assert up.code != 0 and up.out["error"]["code"] == "UNSAFE_PATH", up
    assert f"{log} is open to other users (mode 0644)" in up.out["error"]["msg"], up
    assert _mode(log) == 0o644 and cluster.leftovers() == []
    os.chmod(log, 0o600)
    cluster.up()


def test_a_symlinked_supervisor_state_keeps_the_guardian_from_starting(cluster) -> None:
    _up_then_down(cluster)
    diag = cluster.layout.runtime / "supervisor-state.json"
    moved = cluster.home / "moved-state.json"
    diag.rename(moved)
    before = moved.read_bytes()
    diag.symlink_to(moved)
    up = cluster.cli("up", "--timeout", "60", timeout=120)
    assert up.code == 3 and up.out["error"]["code"] == "CONNECT_FAILED", up
    msg = up.out["error"]["msg"]
    assert msg.startswith("guardian did not come up (exit 2); stopped again what this "
                          "command had started: pid"), msg
    assert f"UNSAFE_PATH: {diag} is a symlink" in msg, msg
    assert cluster.leftovers() == []
    assert moved.read_bytes() == before and os.path.islink(diag)
    assert "Traceback" not in cluster.log("guardian")
    diag.unlink()
    cluster.up()


def test_an_up_stops_the_guardian_it_started_that_never_answered(cluster) -> None:
    """Was: `up` stopped only the owner beside it ("guardian did not come up (exit
    None)") and left the silent guardian running. One that hangs before it listens
    (a test fault) stands for any that does not answer in time."""
    _up_then_down(cluster)
    cluster.env["TENURE_GUARDIAN_FAULT"] = "start.locked:hang-guardian"
    up = cluster.cli("up", "--timeout", "60", timeout=180)
    cluster.env.clear()
    assert up.code == 3 and up.out["error"]["code"] == "CONNECT_FAILED", up
    msg = up.out["error"]["msg"]
    assert msg.startswith(f"guardian did not come up (it did not answer on "
                          f"{cluster.layout.guardian_sock} within 30 s); stopped again "
                          "what this command had started: pid "), msg
    assert len(msg.split("\n")[0].split("; end of")[0].split("pid ")) == 3, msg  # both
    assert cluster.leftovers() == []
    cluster.up()


@pytest.mark.parametrize("name", ["backend.db", "recovery.db"])
def test_an_unsafe_backend_database_blocks_recovery_at_once(cluster, name) -> None:
    """The guardian blocks on the first UNSAFE_PATH (was: 7 attempts, ~63 s) and `up`
    says so at once with the path and the code. The daemons stay, as for any
    RECOVERY_BLOCKED: the fix is followed by `tenure backend recover` (recover.md)."""
    _up_then_down(cluster)
    db = cluster.layout.backend / name
    if name == "backend.db":
        os.chmod(db, 0o644)
        said = f"UNSAFE_PATH: {db} is open to other users (mode 0644)"
    else:
        moved = cluster.home / "moved.db"
        db.rename(moved)
        db.symlink_to(moved)
        said = f"UNSAFE_PATH: {db} is a symlink"
    t0 = time.monotonic()
    up = cluster.cli("up", "--timeout", "60", timeout=120)
    took = time.monotonic() - t0
    assert up.code == 1 and up.out["error"]["code"] == "RECOVERY_BLOCKED", up
    assert f"the guardian gave up starting a backend: {said}" in up.out["error"]["msg"], up
    assert took < 20, took
    assert "retrying in" not in cluster.log("guardian")
    if name == "backend.db":
        assert _mode(db) == 0o644
        os.chmod(db, 0o600)
    else:
        db.unlink()
        moved.rename(db)
    assert cluster.cli("backend", "recover", timeout=120).code == 0
    assert cluster.wait_ready(1)


def test_a_journal_open_to_others_keeps_the_owner_from_starting(cluster) -> None:
    _up_then_down(cluster)
    journal = cluster.layout.execution / "journal.db"
    os.chmod(journal, 0o644)
    before = journal.read_bytes()
    up = cluster.cli("up", "--timeout", "60", timeout=120)
    assert up.code == 3 and up.out["error"]["code"] == "CONNECT_FAILED", up
    msg = up.out["error"]["msg"]
    assert msg.startswith("owner did not come up (exit 2)"), msg
    assert f"UNSAFE_PATH: {journal} is open to other users (mode 0644)" in msg, msg
    assert _mode(journal) == 0o644 and journal.read_bytes() == before
    assert cluster.leftovers() == []
    os.chmod(journal, 0o600)
    cluster.up()
    assert cluster.wait_ready(1)
