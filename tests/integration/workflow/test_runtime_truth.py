"""Status never shows a stale world as current, and an observation gap is repaired."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator

import psutil

CONFIG = """
[stacks.s.apps.sleeper]
command = ["sleep", "infinity"]
instances = 2
"""

CHATTY = """
import os, socket, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
addr = os.environ["NOTIFY_SOCKET"]
addr = "\\0" + addr[1:] if addr.startswith("@") else addr   # an abstract address
end, i = time.monotonic() + 4.0, 0      # a bounded flood: 4 s of notify messages
while time.monotonic() < end:
    s.sendto(b"STATUS=%d" % i, addr)
    i += 1
    if i % 200 == 0:
        time.sleep(0.005)
time.sleep(100000)
"""


def _drain_dead_owner(cluster) -> None:
    """The guided reconcile stops what the dead owner left (nothing by hand)."""
    plan = cluster.cli("owner", "reconcile", "--prepare", check=True).out
    assert cluster.cli("owner", "reconcile", "--drain", plan["digest"]).code == 0


def test_status_after_owner_kill_shows_unknown_and_exits_5(cluster):
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    ok = cluster.cli("status")
    assert ok.code == 0 and ok.out["owner_link"]["state"] == "connected"
    victim = next(iter(cluster.pids().values()))[0]
    owner = int(cluster.cli("owner", "status", check=True).out["owner"]["pid"])
    os.kill(owner, signal.SIGKILL)
    os.kill(victim, signal.SIGKILL)             # by hand, while nobody watches
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        res = cluster.cli("status")
        if res.code == 5:
            break
        time.sleep(0.2)
    assert res.code == 5, res.out
    link = res.out["owner_link"]
    assert link["state"] in ("reconnecting", "lost") and link["current"] is False
    assert link["process"] in (f"pid {owner} is gone", f"pid {owner} has exited"), link
    assert "`tenure owner reconcile --prepare` lists them" in link["next"], link
    assert "`tenure owner reconcile --prepare`" in cluster.cli_text("status", expect=5)
    assert {r["state"] for r in res.out["apps"]} == {"unknown"}
    assert {r["last_state"] for r in res.out["apps"]} == {"ready"}
    # the guardian looks at the owner once a second: its view may lag the backend's
    cluster.wait(lambda: cluster.cli("backend", "status").code == 5, 10,
                 "backend status exiting 5")
    backend = cluster.cli("backend", "status")
    assert backend.out["owner_link"]["state"] in ("reconnecting", "lost")
    assert backend.out["owner_link"]["current"] is False
    inspect = cluster.cli("inspect", "s/sleeper/0")
    assert inspect.code == 5 and inspect.out["owner_link"]["current"] is False
    row = inspect.out["instances"][0]
    assert (row["state"], row["last_state"], row["ready"]) == ("unknown", "ready", None)
    assert "not the present" in cluster.cli_text("inspect", "s/sleeper/0", expect=5)
    _guardian_stop(cluster)
    _drain_dead_owner(cluster)


def _guardian_stop(cluster) -> None:
    pid = int(cluster.cli("backend", "status").out["guardian"]["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


JOB = """
[stacks.s.jobs.nap]
command = ["sleep", "infinity"]
"""


def _job_pid(cluster, job_id: int) -> int:
    def started() -> bool:
        return cluster.call("job.show", {"id": job_id})["state"] == "running"
    cluster.wait(started, 20, "the job running")
    return int(cluster.call("job.show", {"id": job_id})["pid"])


def test_observation_gap_is_repaired_exits_missed_are_handled(cluster):
    cluster.env = {"TENURE_OWNER_RING_SIZE": "32", "TENURE_OWNER_SUBSCRIBER_BUFFER": "1"}
    flag = cluster.home / "flood"
    cluster.up(CONFIG + JOB + f'\n[stacks.s.apps.chatty]\ncommand = ["{sys.executable}", '
               '"-c", ' + json.dumps(CHATTY) + f', "{flag}"]\nrestart = "never"\n')
    cluster.wait_ready(3)
    job_id = cluster.call("job.run", {"template": "s/nap"})["job"]["id"]
    job_pid = _job_pid(cluster, job_id)
    old = {k: a["pid"] for k, a in cluster.apps().items() if "/sleeper/" in k}
    backend = psutil.Process(cluster.backend_pid())
    backend.suspend()                     # it cannot read: the owner drops it, events lost
    try:
        flag.write_text("go")             # the flood fills its socket: dropped
        time.sleep(1.0)
        for pid in [*old.values(), job_pid]:  # exits after the drop ...
            os.kill(pid, signal.SIGKILL)
        time.sleep(3.5)                   # ... and out of the ring before it reads again
    finally:
        backend.resume()

    def restarted() -> bool:
        apps = cluster.apps()
        return all(apps[k]["pid"] not in (None, pid) and apps[k]["ready"]
                   for k, pid in old.items())
    cluster.wait(restarted, 30, "the sleepers restarted after the gap")
    text = cluster.backend_log()
    assert "observation gap" in text
    assert all(cluster.apps()[k]["restarts"] == 1 for k in old)
    cluster.wait(lambda: cluster.call("job.show", {"id": job_id})["state"] != "running", 30,
                 "the job's record settled")
    job = cluster.call("job.show", {"id": job_id})
    assert job["state"] == "failed", job                  # killed: not a success
    assert f"job {job_id}: its exit was lost in an observation gap" in text


def test_the_running_backend_never_adopts_a_new_owner(cluster):
    """A new owner instance answers on the socket while the guardian cannot act (it is
    stopped with SIGSTOP): the backend says owner-changed, exits 5 and launches nothing
    there. Control moves to the new owner only through the guardian, as a new
    generation (docs/reconcile.md)."""
    from backend.cli.daemons import ensure_daemon
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    old_backend = cluster.backend_pid()
    guardian = psutil.Process(int(cluster.cli("backend", "status").out["guardian"]["pid"]))
    owner = int(cluster.cli("owner", "status", check=True).out["owner"]["pid"])
    guardian.suspend()
    try:
        os.kill(owner, signal.SIGKILL)
        cluster.wait(lambda: cluster.cli("status").code == 5, 20, "status exiting 5")
        _drain_dead_owner(cluster)
        ensure_daemon(cluster.layout, "owner", cluster.layout.owner_sock, False)

        def changed() -> bool:
            return cluster.cli("status").out["owner_link"]["state"] == "owner-changed"
        cluster.wait(changed, 20, "the backend reporting owner-changed")
        res = cluster.cli("status")
        assert res.code == 5 and {r["state"] for r in res.out["apps"]} == {"unknown"}
        time.sleep(1.5)                   # the backend's reconnect rounds go on meanwhile
        with cluster.owner() as o:
            assert o.call("inventory")["launches"] == []      # nothing adopted or launched
        assert cluster.backend_pid() == old_backend
    finally:
        guardian.resume()
    cluster.wait(lambda: cluster.backend_pid() != old_backend, 60, "a new generation")
    cluster.wait_ready(2, timeout=60)
    assert cluster.cli("status").code == 0


@contextlib.contextmanager
def _full_disk_owner(cluster) -> Iterator[None]:
    """An owner whose store fails every write of a launch's state while ``disk-full``
    is in the home (owner.testing.DISK_FULL), for ``cluster.up`` to find; down after."""
    from owner.testing import DISK_FULL, OwnerProcess
    os.environ["TENURE_TEST_HOME"] = str(cluster.home)     # read by the owner's preload
    try:
        owner = OwnerProcess(cluster.home, preload=DISK_FULL).start()
    finally:
        del os.environ["TENURE_TEST_HOME"]
    try:
        yield
    finally:
        cluster.down()
        owner.proc.wait(30)
        owner.proc.stdout.close()


def test_a_launch_the_owner_could_not_record_is_shown_and_still_watched(cluster):
    """The owner's disk fills as an app is restarted: the process runs and is watched,
    and status and inspect say the owner's record of it is not written."""
    with _full_disk_owner(cluster):
        cluster.up(CONFIG)
        cluster.wait_ready(2)
        (cluster.home / "disk-full").touch()
        cluster.cli("restart", "s/sleeper/0", check=True)

        def flagged() -> bool:
            return cluster.apps()["s/sleeper/0"]["unrecorded"] is True
        cluster.wait(flagged, 10, "status flagging the unrecorded launch")
        apps = cluster.apps()
        assert apps["s/sleeper/0"]["ready"] and not apps["s/sleeper/1"]["unrecorded"]
        assert "could not record" in cluster.cli_text("status") and \
            "s/sleeper/0" in cluster.cli_text("status").split("could not record")[1]
        assert "NOT WRITTEN" in cluster.cli_text("inspect", "s/sleeper/0")
        (cluster.home / "disk-full").unlink()   # room again: the exit is written
        cluster.cli("stop", "s/sleeper/0", check=True)
        cluster.wait(lambda: not cluster.apps()["s/sleeper/0"]["unrecorded"], 10,
                     "the flag clearing once the exit was written")


def test_a_job_the_owner_could_not_write_down_runs_until_its_timeout(cluster):
    """Was: a job whose running row the owner could not write (its launch answered
    ``uncertain``) ended failed/lost at once while its process ran on, untimed and
    unstoppable. It is running, and its timeout stops it."""
    with _full_disk_owner(cluster):
        cluster.up(CONFIG + '[stacks.s.jobs.slow]\ncommand = ["sleep", "1000"]\n'
                   'timeout = 2\n')
        cluster.wait_ready(2)
        (cluster.home / "disk-full").touch()
        job = cluster.cli("job", "run", "s/slow", check=True).out["job"]["id"]

        def shown() -> dict:
            return dict(cluster.cli("job", "show", str(job), check=True).out)
        cluster.wait(lambda: shown()["state"] != "starting", 10, "the job's start")
        started = shown()
        assert started["state"] == "running" and psutil.pid_exists(started["pid"]), started
        (cluster.home / "disk-full").unlink()   # room again: the exit can be written
        cluster.wait(lambda: shown()["state"] == "timed_out", 15, "the job's timeout")
        cluster.wait(lambda: not psutil.pid_exists(started["pid"]), 5, "its process gone")


def test_logs_of_more_than_a_frame_come_page_by_page_through_the_cli(cluster):
    """6 MiB of 2 KiB lines (the frame limit is 4 MiB): `tenure logs -n 100000` prints
    every line, in order, instead of failing with INTERNAL."""
    writer = ("import sys\nfor i in range(3000):\n"
              "    sys.stdout.write('%05d ' % i + 'x' * 2042 + '\\n')\n"
              "sys.stdout.flush()\nimport time\ntime.sleep(1e6)\n")
    cluster.up(f'[stacks.s.apps.wide]\ncommand = ["{sys.executable}", "-c", '
               + json.dumps(writer) + ']\n')

    def written() -> bool:
        out = cluster.cli_text("logs", "s/wide", "-n", "1")
        return out.startswith("s/wide/0: 02999 ")
    cluster.wait(written, 30, "the 3,000th line in the journal")
    out = cluster.cli_text("logs", "s/wide", "-n", "100000", timeout=120)
    lines = out.splitlines()
    assert [int(ln.split()[1]) for ln in lines] == list(range(3000))
    assert all(len(ln) == len("s/wide/0: ") + 6 + 2042 for ln in lines)
