"""``logs.retention`` on a real owner: an app keeps its own budget of output, a smaller
one prunes at once, the budget and what it pruned outlive an owner restart (it prunes
from the first write, before any backend spoke to the new owner), an app no longer
named keeps its budget while it has lines, a bad call changes nothing, and the pages it
freed go back to the disk."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from owner.journaldb import on_disk
from owner.testing import GuardianKey, OwnerProcess
from protocol.client import Client
from protocol.errors import BadRequest, StaleEpoch

MIB = 1 << 20
STOP = {"signal": "TERM", "timeout": 5, "kill_after": 5}


def _write(c: Client, epoch: int, key: str, mib: int) -> None:
    """A launch of app s/a that writes ``mib`` MiB in 16 KiB lines, then waits."""
    code = (f"import sys, time\nfor _ in range({mib * 64}): sys.stdout.write('x' * 16383 + "
            "'\\n')\nsys.stdout.flush()\ntime.sleep(1000)")
    last = c.call("status")["log_last_id"]
    c.call("launch", {"launch_key": key, "stack": "s", "app": "a", "instance": 0,
                      "generation": 1, "argv": [sys.executable, "-c", code],
                      "env": {"PATH": os.environ["PATH"]}, "stop": STOP}, epoch=epoch)
    deadline = time.monotonic() + 60
    while c.call("status")["log_last_id"] < last + mib * 64:
        assert time.monotonic() < deadline, "the output was not journalled"
        time.sleep(0.05)
    c.call("stop", {"launch_key": key}, epoch=epoch)


def _kept(c: Client) -> int:
    """Bytes of s/a's output the journal holds, read page by page."""
    kept, after, more = 0, 0, True
    while more:
        page = c.call("logs.read", {"app": "a", "after": after, "limit": 10_000})
        kept += sum(len(r["data"]) for r in page["records"])
        after, more = page["next"], page["more"]
    return kept


def test_an_app_budget_prunes_at_once_and_outlives_a_restart(short_home: Path) -> None:
    owner = OwnerProcess(short_home).start()
    key = GuardianKey()
    try:
        with owner.client() as c:
            epoch = key.bootstrap(c, owner.instance)
            with pytest.raises(StaleEpoch):   # a mutation: the epoch's holder only
                c.call("logs.retention", {"budgets": []})
            _write(c, epoch, "k1", 4)
            assert _kept(c) > 3 * MIB   # all of it (the default keeps 64 MiB)
            got = c.call("logs.retention", {"budgets": [{"stack": "s", "app": "a",
                                                         "bytes": MIB}]}, epoch=epoch)
            assert got == {"default": 64 * MIB,
                           "budgets": [{"stack": "s", "app": "a", "bytes": MIB}]}
            assert MIB // 2 <= _kept(c) <= MIB    # pruned at once, no write needed
            said = c.call("logs.read", {"app": "a", "after": 0, "limit": 1})["pruned"]
            assert said and said[0]["instance"] == 0
            with pytest.raises(BadRequest):
                c.call("logs.retention", {"budgets": [{"stack": "s", "app": "a",
                                                       "bytes": 1024}]}, epoch=epoch)
        assert owner.stop() == 0
        owner = OwnerProcess(short_home).start()   # a new owner on the same home
        with owner.client() as c:
            epoch = key.fence(c, owner.instance)
            # what the first owner pruned is said by this one too (stored with the journal)
            assert c.call("logs.read", {"app": "a", "after": 0, "limit": 1})["pruned"] == said
            _write(c, epoch, "k2", 3)
            assert _kept(c) <= MIB
            c.call("logs.retention", {"budgets": [], "keep": True},  # taken out: it holds
                   epoch=epoch)
            _write(c, epoch, "k3", 2)
            assert _kept(c) <= MIB
            # named with the default: none of its own
            got = c.call("logs.retention", {"budgets": [{"stack": "s", "app": "a",
                                                         "bytes": 64 * MIB}]}, epoch=epoch)
            assert got == {"default": 64 * MIB, "budgets": []}
            _write(c, epoch, "k4", 3)
            assert _kept(c) > 3 * MIB
            # without `keep` (a backend of an older release) an app not named has the
            # default, as it had before the owner could keep one
            c.call("logs.retention", {"budgets": [{"stack": "s", "app": "a",
                                                   "bytes": MIB}]}, epoch=epoch)
            assert c.call("logs.retention", {"budgets": []}, epoch=epoch)["budgets"] == []
    finally:
        owner.stop()


def test_a_smaller_budget_gives_the_disk_back(short_home: Path) -> None:
    """The pages a smaller budget freed go back to the file system once the owner's
    writer is idle (owner.journalvacuum): journal.db shrinks to about what it keeps.
    Was: it kept its size for good."""
    owner = OwnerProcess(short_home).start()
    journal = Path(owner.paths.journal)
    try:
        with owner.client() as c:
            epoch = GuardianKey().bootstrap(c, owner.instance)
            _write(c, epoch, "k1", 24)
            assert on_disk(journal) > 20 * MIB
            c.call("logs.retention", {"budgets": [{"stack": "s", "app": "a",
                                                   "bytes": MIB}]}, epoch=epoch)
            deadline = time.monotonic() + 30
            while on_disk(journal) > 4 * MIB:
                assert time.monotonic() < deadline, on_disk(journal)
                time.sleep(0.05)
            assert MIB // 2 <= _kept(c) <= MIB
        assert owner.stop() == 0
    finally:
        owner.stop()
