"""What a job leaves running is stopped: a job whose leader exited with a `setsid` child
still looping was reported ended while the child ran on (outside its timeout, writing
into the ended job's log, `job stop` refused) until `tenure down`. A job stopped for its
timeout takes its `setsid` child with it as well."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocol.procfs import running, start_ticks


def template(name: str, pidfile: Path, then: str, extra: str = "") -> str:
    """A job that starts a `setsid` loop (which writes its pid to ``pidfile`` first),
    waits until the pid is written, says ``fg``, then runs ``then``."""
    loop = f"setsid sh -c 'echo $$ > {pidfile}; for i in $(seq 40); do echo bg $i; " \
           "sleep 1; done'"
    script = f"{loop} & while [ ! -s {pidfile} ]; do sleep 0.05; done; echo fg; {then}"
    return f'[stacks.c.jobs.{name}]\ncommand = ["sh", "-c", "{script}"]\n{extra}'


def gone(pidfile: Path) -> bool:
    """Whether the setsid child that wrote ``pidfile`` is gone (checked by pid and start
    ticks; one gone before its ticks were read is gone)."""
    pid = int(pidfile.read_text())
    ticks = start_ticks(pid)
    return ticks is None or not running(pid, ticks)


def test_what_a_job_leaves_running_is_stopped_and_its_outcome_stays(cluster: Any) -> None:
    pidfile = cluster.home / "bg.pid"
    cluster.up(template("bg", pidfile, "exit 0", "timeout = 3\n"))
    res = cluster.cli("job", "run", "c/bg", "--wait", timeout=60)
    assert res.ok, res
    job = res.out["job"]
    assert (job["state"], job["outcome"], job["exit_code"]) == ("succeeded", "success", 0)
    cluster.wait(lambda: gone(pidfile), 20, "the setsid child stopped")
    exited = cluster.call("job.show", {"id": job["id"]})["history"][-1]
    assert (exited["event"], exited["to"]) == ("Exited", "succeeded")
    assert exited["detail"]["descendants"] >= 1
    shown = cluster.cli_text("job", "show", str(job["id"]))
    assert "outlived by" in shown, shown
    # the record is as its leader ended it, and stays so
    again = cluster.call("job.show", {"id": job["id"]})
    assert (again["state"], again["outcome"]) == ("succeeded", "success")


def test_a_timed_out_job_takes_its_setsid_child_with_it(cluster: Any) -> None:
    pidfile = cluster.home / "late.pid"
    cluster.up(template("late", pidfile, "sleep 30", "timeout = 1\n"))
    res = cluster.cli("job", "run", "c/late", "--wait", timeout=60)
    assert res.code == 1, res
    assert (res.out["job"]["state"], res.out["job"]["outcome"]) == ("timed_out", "timeout")
    cluster.wait(lambda: gone(pidfile), 20, "the setsid child stopped")
