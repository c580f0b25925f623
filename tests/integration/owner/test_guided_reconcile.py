"""After an owner crash, reconcile is a guided, reviewable flow: --prepare seals the
dead owner's live processes (an escaped setsid child included) with a digest, --drain
stops exactly those and writes the acknowledgement, and tenure starts again. Nobody
looks up or kills a pid by hand."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil

CONFIG = """
[stacks.s.apps.sleeper]
command = ["sleep", "infinity"]
instances = 2

[stacks.s.apps.forker]
command = ["sh", "-c", "setsid sleep 100000 & exec sleep 100000"]
"""


def _carrier(cluster, key: str, home: str | None = None) -> subprocess.Popen[bytes]:
    """A process that joins a dead launch after the evidence was sealed (of ``home``'s
    launch with that key when given: another home's)."""
    env = {**os.environ, "TENURE_LAUNCH_KEY": key,
           "TENURE_OWNER_HOME": home or os.path.realpath(cluster.home)}
    return subprocess.Popen(["sleep", "1000"], env=env, start_new_session=True)


def test_owner_crash_is_reconciled_with_a_sealed_plan_and_a_guided_drain(cluster):
    cluster.up(CONFIG)
    cluster.wait_ready(3)
    apps = cluster.pids()
    cluster.kill_owner()
    refused = cluster.cli("up")
    assert refused.code != 0
    assert "RECONCILE_REQUIRED" in refused.stderr + json.dumps(refused.out)

    plan = cluster.cli("owner", "reconcile", "--prepare")
    assert plan.code == 0, plan.stderr
    body = plan.out
    sealed = {p["pid"] for ln in body["launches"] for p in ln["processes"]}
    assert {pid for pid, _ in apps.values()} <= sealed
    forker = next(ln for ln in body["launches"] if ln["app"] == "s/forker/0")
    escaped = [p for p in forker["processes"] if p["pid"] != forker["pid"]]
    assert escaped, forker            # the setsid child, found by its launch key
    evidence = cluster.layout.execution / "reconcile-evidence.json"
    assert evidence.stat().st_mode & 0o777 == 0o600

    late = _carrier(cluster, forker["launch_key"])
    try:
        changed = cluster.cli("owner", "reconcile", "--drain", body["digest"])
        assert changed.code == 2 and "not in the sealed evidence" in json.dumps(changed.out)
        assert all(psutil.pid_exists(p) for p in sealed)   # nothing was stopped
    finally:
        late.kill()
        late.wait()
    wrong = cluster.cli("owner", "reconcile", "--drain", "0" * 64)
    assert wrong.code == 2 and "CONFLICT" in json.dumps(wrong.out)

    # the same launch key in another home (keys repeat across homes): not ours
    foreign = _carrier(cluster, forker["launch_key"], home="/srv/another-tenure-home")
    try:
        done = cluster.cli("owner", "reconcile", "--drain", body["digest"])
        assert done.code == 0, done.out
        assert foreign.poll() is None                  # untouched
    finally:
        foreign.kill()
        foreign.wait()
    assert done.out["stopped"] == len(sealed) and len(done.out["proven_gone"]) == 3
    for pid in sealed:
        assert not psutil.pid_exists(pid) or \
            psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    cluster.up()
    cluster.wait_ready(3, timeout=90)
    assert set(cluster.pids().values()).isdisjoint(apps.values())


def test_prepare_refuses_while_an_owner_runs(cluster):
    cluster.up(CONFIG)
    res = subprocess.run([sys.executable, "-m", "owner", "reconcile", "--prepare",
                          "--home", str(cluster.home)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 5 and "ALREADY_RUNNING" in res.stdout


def test_reconcile_of_a_home_without_owner_state_says_so(cluster, tmp_path):
    """A mistyped home was a FileNotFoundError traceback. Run from a directory holding an
    ``owner.py`` of its own, which the CLI's ``python -m owner`` must not run."""
    (tmp_path / "owner.py").write_text("raise SystemExit('the working directory ran')\n")
    missing = str(cluster.home / "nosuch")
    for extra in ([], ["--prepare"], ["--drain", "0" * 64]):
        res = subprocess.run([sys.executable, "-m", "backend.cli.main", "--home", missing,
                              "--json", "owner", "reconcile", *extra], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 2, (extra, res.stdout, res.stderr[-500:])
        out = json.loads(res.stdout)
        assert out["code"] == "NOT_FOUND" and out["data"] == {"path": f"{missing}/execution"}
    assert not os.path.exists(missing)                  # and nothing was created


def test_an_owner_db_that_lost_its_records_leaves_no_duplicates(cluster):
    """After an owner crash, an emptied owner.db was taken for a new one and a missing
    one created again: reconcile said 'nothing to reconcile' and `up` started every app a
    second time beside the first. An empty database is refused now, and reconcile counts
    every process that carries this home in its environment."""
    cluster.up(CONFIG)
    cluster.wait_ready(3)
    apps = {pid for pid, _ in cluster.pids().values()}
    cluster.kill_owner()
    db = cluster.layout.execution / "owner.db"
    for side in ("-wal", "-shm"):
        (cluster.layout.execution / f"owner.db{side}").unlink(missing_ok=True)
    db.write_bytes(b"")
    emptied = cluster.cli("owner", "reconcile")
    assert emptied.code == 2 and emptied.out["code"] == "STATE_CORRUPT", emptied.out
    assert emptied.out["data"] == {"path": str(db)} and db.stat().st_size == 0
    db.unlink()                                      # as the message says: move it away
    listed = cluster.cli("owner", "reconcile")
    assert listed.code == 4 and listed.out["code"] == "PROCESSES_ALIVE", listed.out
    seen = {pid for s in listed.out["data"]["survivors"] for pid in s["pids"]}
    assert apps <= seen, (apps, listed.out)
    assert {s["why"] for s in listed.out["data"]["survivors"]} == {
        "this home in its environment, no launch of it recorded"}
    assert not db.exists()                           # reconcile creates nothing
    for pid in seen:
        os.kill(pid, signal.SIGKILL)
    cluster.wait(lambda: all(not psutil.pid_exists(p) or psutil.Process(p).status() ==
                             psutil.STATUS_ZOMBIE for p in seen), 10, "the survivors gone")
    assert cluster.cli("owner", "reconcile").code == 0
    # (up waited for the backend that answered, still attached to the dead owner while
    # the guardian moved control, and failed OWNER_CHANGED)
    cluster.up(CONFIG)
    cluster.wait_ready(3)
    assert set(cluster.pids()) and not {p for p, _ in cluster.pids().values()} & seen


LOOPING = CONFIG + """
[stacks.s.apps.looper]
command = ["sh", "-c", "while :; do sleep 0.1; done"]
"""


def test_a_damaged_owner_db_is_set_aside_and_its_processes_drained(cluster):
    """owner.db damaged after an owner crash (here: pages of garbage): the owner and
    reconcile refuse it, naming the way out. Set aside, the guided reconcile seals every
    process that carries this home, by the launch key it carries, with the leader that
    leads its session (so what a leader forks after the seal joins, as for a recorded
    launch), stops them, and tenure starts again with no duplicate."""
    cluster.up(LOOPING)
    cluster.wait_ready(4)
    with cluster.owner() as c:
        rows = c.call("inventory")["launches"]
    leaders = {r["launch_key"]: r["pid"] for r in rows}
    forker = next(r["launch_key"] for r in rows if r["app"] == "forker")
    cluster.kill_owner()
    db = cluster.layout.execution / "owner.db"
    for side in ("-wal", "-shm"):
        (cluster.layout.execution / f"owner.db{side}").unlink(missing_ok=True)
    db.write_bytes(b"\x5a" * 8192)
    for argv in (["owner", "reconcile", "--prepare"], ["owner", "reconcile"]):
        refused = cluster.cli(*argv)
        assert refused.code == 2 and refused.out["code"] == "STATE_CORRUPT", refused.out
        assert 'docs/reconcile.md, "A damaged owner.db"' in refused.out["msg"]
    up = cluster.cli("up")
    assert up.code != 0 and "A damaged owner.db" in up.stderr + json.dumps(up.out)
    assert all(psutil.pid_exists(p) for p in leaders.values())   # nothing touched

    aside = cluster.layout.execution / "owner.db.damaged"
    db.rename(aside)
    plan = cluster.cli("owner", "reconcile", "--prepare")
    assert plan.code == 0, plan.out
    launches = plan.out["launches"]
    assert {ln["state"] for ln in launches} == {"unrecorded"}
    # each under the launch key it carries, with its leader
    assert {ln["launch_key"]: ln["pid"] for ln in launches} == leaders
    escaped = next(ln for ln in launches if ln["launch_key"] == forker)
    assert len(escaped["processes"]) == 2                   # the setsid child too
    assert escaped["app"] == "s/forker/0"                   # as its environment says
    text = cluster.cli_text("owner", "reconcile", "--prepare")
    assert "(no launch of owner.db: this home in its environment)" in text
    plan = cluster.cli("owner", "reconcile", "--prepare")   # sealed again, as reviewed
    looper = psutil.Process(next(p for k, p in leaders.items() if "/looper/" in k))
    sealed_now = {p["pid"] for ln in plan.out["launches"] for p in ln["processes"]}
    cluster.wait(lambda: any(c.pid not in sealed_now for c in looper.children()), 30,
                 "the looper forked after the seal")     # (a fixed 0.5 s, under load, not)
    done = cluster.cli("owner", "reconcile", "--drain", plan.out["digest"])
    assert done.code == 0, done.out
    assert done.out["joined"], done.out                     # the looper's new children
    # 'reconciled: 0 launches proven gone' read as if nothing was: owner.db names none.
    # Counted as the second review sealed them (once in a clean run it held one more
    # than the first: a process of the looper caught as it forked can be sealed apart)
    reviewed = plan.out["launches"]
    assert (done.out["unrecorded"], done.out["proven_gone"]) == (len(reviewed), []), \
        done.out
    sealed = {p["pid"] for ln in plan.out["launches"] for p in ln["processes"]}
    for pid in sealed | set(done.out["joined"]):
        assert not psutil.pid_exists(pid) or \
            psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert aside.read_bytes() == b"\x5a" * 8192             # kept as it was

    cluster.up(LOOPING)
    cluster.wait_ready(4, timeout=90)
    assert not {p for p, _ in cluster.pids().values()} & sealed


def test_a_damaged_receipt_set_aside_still_needs_the_reconcile_owner_db_asks_for(cluster):
    """The receipt is a summary: a damaged one is refused naming the way out, and set
    aside, owner.db still makes the start wait for a reconcile of what runs."""
    cluster.up(CONFIG)
    cluster.wait_ready(3)
    apps = {pid for pid, _ in cluster.pids().values()}
    cluster.kill_owner()
    receipt = cluster.layout.execution / "owner-receipt.json"
    receipt.write_text("{not json")
    refused = cluster.cli("owner", "reconcile")
    assert refused.code == 2 and refused.out["code"] == "STATE_CORRUPT", refused.out
    assert "a damaged receipt may be set aside" in refused.out["msg"], refused.out
    receipt.rename(receipt.with_name("owner-receipt.json.damaged"))
    up = cluster.cli("up")
    assert up.code != 0 and "RECONCILE_REQUIRED" in up.stderr + json.dumps(up.out)
    assert all(psutil.pid_exists(p) for p in apps)

    plan = cluster.cli("owner", "reconcile", "--prepare")
    assert plan.code == 0 and apps <= {p["pid"] for ln in plan.out["launches"]
                                       for p in ln["processes"]}, plan.out
    assert cluster.cli("owner", "reconcile", "--drain", plan.out["digest"]).code == 0
    cluster.up(CONFIG)
    cluster.wait_ready(3)


def test_with_owner_db_and_the_receipt_set_aside_the_start_waits_for_a_reconcile(cluster):
    """Was: with neither, the owner started beside the old apps, and `reconcile` said
    there was nothing to reconcile. The processes that carry this home hold it now."""
    cluster.up(CONFIG)
    cluster.wait_ready(3)
    apps = {pid for pid, _ in cluster.pids().values()}
    cluster.kill_owner()
    for name in ("owner.db", "owner.db-wal", "owner.db-shm", "owner-receipt.json"):
        path = cluster.layout.execution / name
        if path.exists():
            path.rename(path.with_name(name + ".damaged"))
    up = cluster.cli("up")
    said = up.stderr + json.dumps(up.out)
    assert up.code != 0 and "RECONCILE_REQUIRED" in said, said
    assert "processes carry this home in their environment" in said, said
    listed = cluster.cli("owner", "reconcile")
    assert listed.code == 4 and listed.out["code"] == "PROCESSES_ALIVE", listed.out
    plan = cluster.cli("owner", "reconcile", "--prepare")
    assert apps <= {p["pid"] for ln in plan.out["launches"] for p in ln["processes"]}
    assert cluster.cli("owner", "reconcile", "--drain", plan.out["digest"]).code == 0
    cluster.up(CONFIG)
    cluster.wait_ready(3)
    assert not {p for p, _ in cluster.pids().values()} & apps


def test_daemons_started_from_an_apps_shell_carry_no_app_marks(cluster):
    """A deploy job's `tenure up` runs with an app's environment: the owner, guardian
    and backend it starts must not look like that app to a reconcile."""
    home = os.path.realpath(cluster.home)
    cluster.up(CONFIG)
    cluster.wait_ready(3)
    assert cluster.down().ok   # a clean receipt: a start looks no further
    cluster.env = {"TENURE_LAUNCH_KEY": "s/sleeper/0/1", "TENURE_OWNER_HOME": home,
                   "TENURE_OWNER_HOME_ID": "1:2"}
    cluster.up(CONFIG)
    cluster.wait_ready(3)
    st = cluster.cli("backend", "status", check=True).out
    daemons = [st["owner"]["pid"], st["guardian"]["pid"], st["backend"]["pid"]]
    for pid in daemons:
        env = psutil.Process(pid).environ()
        assert not {"TENURE_LAUNCH_KEY", "TENURE_OWNER_HOME",
                    "TENURE_OWNER_HOME_ID"} & set(env), (pid, env)


def test_a_reconcile_inside_one_of_this_homes_apps_is_refused(cluster):
    """It could neither prove that app gone nor stop it without stopping itself."""
    cluster.up(CONFIG)
    cluster.wait_ready(3)
    cluster.kill_owner()
    cluster.env = {"TENURE_LAUNCH_KEY": "s/sleeper/0/1",
                   "TENURE_OWNER_HOME": os.path.realpath(cluster.home)}
    for extra in ([], ["--prepare"], ["--drain", "0" * 64]):
        res = cluster.cli("owner", "reconcile", *extra)
        assert res.code == 2 and res.out["code"] == "BAD_REQUEST", (extra, res.out)
        assert "run it from a shell outside them" in res.out["msg"]
    cluster.env = {}
    plan = cluster.cli("owner", "reconcile", "--prepare")
    assert cluster.cli("owner", "reconcile", "--drain", plan.out["digest"]).code == 0
