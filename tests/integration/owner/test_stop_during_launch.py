"""A stop of a launch that is under way waits for its answer, then stops its process.

Was: until the spawn the key had no process, so the stop answered NotFound; a backend
that took that for 'already gone' marked the instance stopped, and the process the
launch started a moment later ran untracked. Here each launch is held a second by a preload."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from owner.testing import GuardianKey, OwnerProcess
from protocol.procfs import running

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_owner import Live

SLOW_SPAWN = """
import asyncio
from owner import supervise as _supervise
_real = _supervise.Launcher._launch
async def _slow(self, *a, **k):
    await asyncio.sleep(1.0)      # the loop serves other requests meanwhile
    return await _real(self, *a, **k)
_supervise.Launcher._launch = _slow
"""

def test_a_stop_during_a_launch_stops_what_it_started(short_home: Path) -> None:
    owner = OwnerProcess(short_home, preload=SLOW_SPAWN).start()
    lv = Live(owner, GuardianKey())
    answers: dict[str, object] = {}
    launching = threading.Thread(target=lambda: answers.update(
        launch=lv.launch(["sleep", "100031"])))
    try:
        launching.start()
        time.sleep(0.3)                   # the launch is recorded, its spawn not done
        with owner.client() as other:     # a second connection, as a stop comes on one
            assert lv.gk.signed is not None
            other.use_grant(lv.gk.signed)
            stopped = other.call("stop", {"launch_key": "k1"}, epoch=lv.epoch)
        launching.join(10)
        launched = answers["launch"]
        assert isinstance(launched, dict) and launched["pid"] == stopped["pid"], \
            (launched, stopped)
        assert stopped["outcome"] == "stopped", stopped
        assert not running(launched["pid"], launched["start_ticks"])
    finally:
        launching.join(10)   # answered before the owner stops: its process is stopped too
        lv.c.close()
        assert owner.stop() == 0
