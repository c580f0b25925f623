"""Which owner.db commits the real owner fsyncs (owner.store's docstring says why).

Facts that must outlive the boot (the epoch and grant, a stack's intent) are fsynced
before the answer; facts about processes of this boot (launch, running and exit rows,
descendants) are committed to the WAL only, which survives the owner's crash. Watched
with strace on the running owner: every fsync/fdatasync of owner.db's files, by path."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from owner.testing import GuardianKey, OwnerProcess

pytestmark = pytest.mark.skipif(shutil.which("strace") is None,
                                reason="needs strace (.ci/run installs it)")


def _traced(pid: int) -> bool:
    """Every thread of ``pid`` has a tracer."""
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/status") as f:
            tracer = next(line for line in f if line.startswith("TracerPid:"))
        if tracer.split()[1] == "0":
            return False
    return True


@contextmanager
def syncs(owner: OwnerProcess, out: Path) -> Iterator[Callable[[], list[str]]]:
    """Trace the owner's syncs while the block runs; the callable, after the block,
    returns the traced sync calls on owner.db and its WAL."""
    assert owner.proc is not None
    tracer = subprocess.Popen(
        ["strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync", "-e", "signal=none",
         "-o", str(out), "-p", str(owner.proc.pid)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 10
        while not _traced(owner.proc.pid):
            assert tracer.poll() is None, tracer.stderr.read() if tracer.stderr else ""
            assert time.monotonic() < deadline, "strace did not attach"
            time.sleep(0.01)
        yield lambda: lines
    finally:
        tracer.terminate()   # detaches; the owner runs on
        tracer.wait(10)
        if tracer.stderr is not None:
            tracer.stderr.close()
    lines += [line for line in out.read_text().splitlines() if "owner.db" in line]


def launch(c: Any, epoch: int, n: int) -> dict[str, Any]:
    return c.call("launch", {
        "launch_key": f"k{n}", "stack": "s", "app": "a", "instance": n, "generation": 1,
        "argv": ["sleep", "1000"], "env": {"PATH": os.environ["PATH"]},
        "stop": {"signal": "KILL", "timeout": 5}}, epoch=epoch)


def test_the_fence_and_intents_are_fsynced_process_rows_are_not(owner, short_home):
    c = owner.client()
    gk = GuardianKey()
    try:
        with syncs(owner, short_home / "a.trace") as fence_syncs:
            epoch = gk.bootstrap(c, owner.instance)
        assert [s for s in fence_syncs() if "owner.db-wal" in s], fence_syncs()

        with syncs(owner, short_home / "b.trace") as process_syncs:
            rows = [launch(c, epoch, n) for n in range(20)]
            for r in rows:    # stopped: an exit row each
                c.call("stop", {"launch_key": r["launch_key"]}, epoch=epoch)
        assert all(r["state"] == "running" for r in rows)
        assert process_syncs() == []

        with syncs(owner, short_home / "c.trace") as intent_syncs:
            c.call("stack.set_intent", {"stack": "s", "intent": "stopped",
                                    "expected_revision": 0}, epoch=epoch)
        assert [s for s in intent_syncs() if "owner.db-wal" in s], intent_syncs()
    finally:
        c.close()
