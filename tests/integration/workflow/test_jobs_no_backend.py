"""Job commands through the real path when no backend answers and none is coming:
`tenure job logs ID` with tenure down reads the journal file as `tenure logs` does (a
follower, the rest once tenure stopped), and a keyed `job run --wait` whose guardian is
dead (unmanaged: nothing restarts it) ends at once with BACKEND_UNAVAILABLE saying what
to run.

Was: `job logs` failed with BACKEND_UNAVAILABLE (exit 3) while `tenure logs` read the
same lines from the file; the keyed run waited its whole --timeout for a backend that
could not come."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from protocol.client import Client

PY = sys.executable
CODE = ('import sys, time; print("out", sys.argv[1], flush=True); time.sleep(0.2); '
        'print("err", sys.argv[1], file=sys.stderr)')
CONFIG = (f"[stacks.j.jobs.echo]\ncommand = [\"{PY}\", \"-c\", '{CODE}']\n"
          f"[stacks.j.jobs.other]\ncommand = [\"{PY}\", \"-c\", '{CODE}']\n")
NOTE = "tenure: job logs: tenure is not running: reading "


def test_job_logs_read_the_journal_file_while_tenure_is_down(cluster):
    cluster.up(CONFIG)
    first = cluster.cli("job", "run", "j/echo", "--arg", "a", "--wait", check=True)
    other = cluster.cli("job", "run", "j/other", "--arg", "b", "--wait", check=True)
    ids = first.out["job"]["id"], other.out["job"]["id"]
    online = [cluster.cli_text("job", "logs", str(i)) for i in ids]
    assert online == ["out a\nerr a (stderr)\n", "out b\nerr b (stderr)\n"]
    cluster.down()

    for job_id, name, arg, text in zip(ids, ("echo", "other"), "ab", online, strict=True):
        res = cluster.cli("job", "logs", str(job_id))   # --json: one record per line
        assert res.ok, res
        recs = [json.loads(line) for line in res.out.splitlines()]
        assert [(r["app"], r["instance"], r["stream"], r["data"]) for r in recs] == [
            (f"job:{name}", job_id, "stdout", f"out {arg}"),
            (f"job:{name}", job_id, "stderr", f"err {arg}")], res
        assert res.stderr.startswith(NOTE) and cluster.layout.journal in res.stderr, res
        assert cluster.cli_text("job", "logs", str(job_id)) == text
    assert cluster.cli_text("job", "logs", str(ids[0]), "-n", "1") == "err a (stderr)\n"
    assert cluster.cli_text("job", "logs", str(ids[1]), "--stream", "stdout") == "out b\n"
    assert cluster.cli_text("job", "logs", str(ids[0]), "-f") == online[0]   # and ends

    res = cluster.cli("job", "logs", "999")
    assert res.code == 1 and res.out["error"]["code"] == "NOT_FOUND", res
    assert "the journal has no lines of job 999" in res.out["error"]["msg"]
    assert res.stderr.startswith(NOTE), res


def test_a_keyed_wait_ends_at_once_when_the_guardian_is_dead(cluster):
    cluster.up(CONFIG)
    with Client(cluster.layout.guardian_sock, pin=False, timeout=10) as c:
        guardian = int(c.call("status")["guardian"]["pid"])
    backend = cluster.backend_pid()
    for pid in (guardian, backend):
        os.kill(pid, signal.SIGKILL)
    cluster.wait(lambda: not os.path.exists(f"/proc/{guardian}") and
                 not os.path.exists(f"/proc/{backend}"), what="guardian and backend gone")

    began = time.monotonic()
    res = cluster.cli("job", "run", "j/echo", "--key", "K", "--arg", "x", "--wait",
                      "--timeout", "20")
    assert time.monotonic() - began < 10, res   # was: the whole --timeout
    assert res.code == 3 and res.out["error"]["code"] == "BACKEND_UNAVAILABLE", res
    msg = res.out["error"]["msg"]
    assert "the guardian is not running" in msg and "`tenure up`" in msg, msg
    assert res.out["error"]["data"]["guardian_running"] is False


def test_a_job_logs_follower_reads_the_rest_from_the_file_once_tenure_stopped(cluster):
    """Was: the follower ended with BACKEND_UNAVAILABLE (exit 3) at `tenure down`."""
    cluster.up('[stacks.j.jobs.long]\ncommand = ["sh", "-c", "echo started; sleep 60"]\n')
    job = cluster.cli("job", "run", "j/long", check=True).out["job"]["id"]
    cluster.wait(lambda: cluster.cli_text("job", "logs", str(job)) == "started\n",
                 what="the job's first line")
    follower = cluster.follow("job", "logs", str(job), "-f")
    try:
        time.sleep(0.5)
        cluster.down()
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert follower.returncode == 0, err
    assert out.startswith("started\n"), out
    assert err.startswith("tenure: job logs: tenure stopped: reading "), err


def test_a_wait_on_a_stopped_backend_says_so(cluster):
    """A stopped backend (SIGSTOP, a debugger) is alive, so the guardian does not
    replace it: `job run` waited silently for its whole --timeout (an hour by default).
    It says so once, naming the pid and the kill -CONT, and waits within --timeout."""
    cluster.up(CONFIG)
    backend = cluster.backend_pid()
    os.kill(backend, signal.SIGSTOP)
    try:
        cluster.wait(lambda: cluster.cli("status").code == 3, 30, "the backend silent")
        began = time.monotonic()
        res = cluster.cli("job", "run", "j/echo", "--arg", "x", "--timeout", "8")
        took = time.monotonic() - began
    finally:
        os.kill(backend, signal.SIGCONT)
    assert res.code == 3 and res.out["error"]["code"] == "BACKEND_UNAVAILABLE", res
    assert 7 < took < 30, (took, res)                       # its own --timeout
    said = [ln for ln in res.stderr.splitlines() if "no backend answers" in ln]
    assert said == [f"tenure: job run: no backend answers: the backend pid {backend} is "
                    f"stopped (SIGSTOP or a debugger); kill -CONT {backend} continues it; "
                    "waiting for it up to --timeout (Ctrl-C stops waiting)"], res.stderr
    assert cluster.cli("job", "run", "j/echo", "--arg", "y", "--wait").code == 0
