"""The launcher's pipe drainers, in process with real processes, owner.db and journal:
each launch has one per stream while its pipes are open, and a drainer is dropped at
its pipe's EOF (by its key, not by rebuilding the list of every launch's drainers at
each exit)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

from owner.journal import Journal
from owner.observations import ObservationRing
from owner.specs import LaunchSpec
from owner.store import OwnerStore
from owner.supervise import Launcher


def params(key: str, n: int) -> dict[str, object]:
    return {"launch_key": key, "stack": "s", "app": "a", "instance": n, "generation": 1}


def spec(argv: list[str]) -> LaunchSpec:
    return LaunchSpec.from_wire({"argv": argv, "env": {"PATH": os.environ["PATH"]},
                                 "stop": {"signal": "KILL", "timeout": 5}})


def test_a_drainer_is_dropped_at_its_eof_and_the_others_stay(short_home: Path) -> None:
    store = OwnerStore(str(short_home / "owner.db"))
    journal = Journal(short_home / "journal.db")

    async def main() -> None:
        launcher = Launcher(store, journal, ObservationRing(), "boot",
                            str(short_home / "n.sock"), reap_orphans=False,
                            home=str(short_home))
        try:
            await launcher.launch(params("stays", 0), spec(["sleep", "30"]), 1)
            ends = await launcher.launch(params("ends", 1), spec(["sleep", "30"]), 1)
            assert set(launcher.drainers) == {("stays", "stdout"), ("stays", "stderr"),
                                              ("ends", "stdout"), ("ends", "stderr")}
            assert ends.pid is not None
            os.kill(ends.pid, signal.SIGKILL)   # its pipes reach EOF now, not before
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while ("ends", "stdout") in launcher.drainers or \
                    ("ends", "stderr") in launcher.drainers:
                assert loop.time() < deadline, launcher.drainers
                await asyncio.sleep(0.01)
            assert set(launcher.drainers) == {("stays", "stdout"), ("stays", "stderr")}
            assert not await launcher.wait_drained(0.05)   # sleep's pipes are still open
            await launcher.stop("stays", None)
            assert await launcher.wait_drained(10) and launcher.drainers == {}
        finally:
            for key in ("stays", "ends"):   # whatever failed above, end what runs
                with contextlib.suppress(Exception):
                    await launcher.stop(key, None)
            launcher.close()

    try:
        asyncio.run(main())
    finally:
        journal.close()
        store.close()
