"""The owner's inspector keeps a psutil handle per process it inspected (for CPU percent
between two looks); the handles of processes that are gone are dropped, not kept until
each is inspected once more (it never is: a client that inspects apps restarted hourly
grew the owner by a handle an hour)."""

from __future__ import annotations

import os
import subprocess

from owner.procinfo import Inspector
from protocol.identity import start_ticks


def test_handles_of_processes_no_longer_live_are_dropped() -> None:
    inspector = Inspector()
    me = (os.getpid(), start_ticks(os.getpid()))
    child = subprocess.Popen(["sleep", "30"])
    try:
        other = (child.pid, start_ticks(child.pid))
        inspector.inspect(*me)
        inspector.inspect(*other)
        assert len(inspector) == 2
        inspector.keep_only({me})
        assert len(inspector) == 1
        assert inspector.inspect(*me)["pid"] == os.getpid()
    finally:
        child.kill()
        child.wait()
