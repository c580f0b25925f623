"""Concurrent launches through the real owner share their owner.db commits (group
commit, owner.groupcommit) and keep every promise one commit per write kept: each
answer is given once its row is on disk, a key launched twice at once starts one
process, an inventory asked for after launches lists them, and a fence that lands
while rows are being written lets no launch of the old epoch start a process. A launch
that no other request can join commits its rows at once instead."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from owner.testing import GuardianKey, OwnerProcess
from protocol.aclient import AsyncClient
from protocol.errors import NotFound, TenureError

N = 30

# Records how each owner.db transaction of a launch was made: "now" (at once, alone) or
# "group N" (N writes after waiting a turn).
RECORD_COMMITS = """
import os
from owner import groupcommit
_now, _flush = groupcommit.GroupCommit._commit_now, groupcommit.GroupCommit._flush
def _record(line):
    with open(os.path.join(os.environ["TENURE_TEST_HOME"], "commits"), "a") as f:
        f.write(line + "\\n")
def _commit_now(self, fn):
    _record("now")
    return _now(self, fn)
def _group(self):
    _record(f"group {len(self._queued)}")
    return _flush(self)
groupcommit.GroupCommit._commit_now = _commit_now
groupcommit.GroupCommit._flush = _group
"""


def params(n: int) -> dict[str, Any]:
    return {"launch_key": f"g{n}", "stack": "s", "app": "a", "instance": n,
            "generation": 1, "argv": ["sleep", "1000"], "env": {"PATH": os.environ["PATH"]},
            "stop": {"signal": "KILL", "timeout": 5}}


async def burst(sock: str, grant: dict[str, Any], epoch: int, keys: list[int]
                ) -> list[Any]:
    """Every launch of ``keys`` in flight at once on one connection, then (sent behind
    them, answered last) the inventory."""
    ac = AsyncClient(sock, pin=False)
    ac.hello = ac.hello.replace(grant=dict(grant))
    try:
        return await asyncio.gather(*(ac.call("launch", params(n), epoch=epoch)
                                      for n in keys), ac.call("inventory"),
                                    return_exceptions=True)
    finally:
        await ac.close()


def stop_all(c: Any, epoch: int) -> None:
    for r in c.call("inventory")["launches"]:
        c.call("stop", {"launch_key": r["launch_key"]}, epoch=epoch)


def test_a_burst_of_launches_all_run_and_a_repeated_key_starts_once(owner):
    c = owner.client()
    gk = GuardianKey()
    try:
        epoch = gk.bootstrap(c, owner.instance)
        keys = [*range(N), 3, 3, 7]          # three repeats inside the same burst
        *answers, inventory = asyncio.run(burst(str(owner.paths.sock), gk.signed, epoch,
                                                keys))
        assert not [a for a in answers if isinstance(a, BaseException)], answers
        listed = {r["launch_key"] for r in inventory["launches"]}
        assert listed == {a["launch_key"] for a in answers}   # none missing
        by_key: dict[str, set[int]] = {}
        for a in answers:
            by_key.setdefault(a["launch_key"], set()).add(a["pid"])
        assert len(by_key) == N and all(len(p) == 1 for p in by_key.values()), by_key
        live = {r["launch_key"]: r for r in c.call("inventory")["launches"]}
        assert set(live) == set(by_key)
        for key, pids in by_key.items():    # what was answered is what owner.db says
            assert live[key]["pid"] in pids and live[key]["state"] == "running"
        stop_all(c, epoch)
    finally:
        c.close()


def test_a_fence_during_a_burst_starts_nothing_for_the_old_epoch(owner):
    """The fence is sent right behind the launches on the same connection: the owner
    runs it while their rows are being written, before any of them spawned."""
    c = owner.client()
    gk = GuardianKey()
    try:
        old = gk.bootstrap(c, owner.instance)
        new = old + 1
        fence = gk.grant(new, owner.instance)

        async def race() -> list[Any]:
            ac = AsyncClient(str(owner.paths.sock), pin=False)
            ac.hello = ac.hello.replace(grant=dict(gk.signed))
            try:
                calls = [ac.call("launch", params(n), epoch=old) for n in range(N)]
                return await asyncio.gather(*calls, ac.call("fence", {"grant": fence}),
                                            return_exceptions=True)
            finally:
                await ac.close()

        *answers, fenced = asyncio.run(race())
        assert not isinstance(fenced, BaseException), fenced
        gk.epoch, gk.signed = new, fence
        c.use_grant(fence)
        refused = [n for n, a in enumerate(answers) if isinstance(a, TenureError)]
        assert refused and all(answers[n].code_str == "STALE_EPOCH" for n in refused), \
            answers
        live = {r["launch_key"] for r in c.call("inventory")["launches"]}
        started = {a["launch_key"] for a in answers if not isinstance(a, BaseException)}
        assert live == started                # no process for a refused launch
        for n in refused:    # no row left "starting": none, or one that says failed
            try:
                state = c.call("inspect", {"launch_key": f"g{n}"})["state"]
            except NotFound:
                continue
            assert state == "failed", (n, state)
        stop_all(c, new)
    finally:
        c.close()


def test_a_launch_alone_commits_at_once_and_a_burst_still_shares(short_home: Path,
                                                               monkeypatch: pytest.MonkeyPatch):
    """One launch at a time (a restart after a kill): both of its rows are committed at
    once, with the answer after them; a burst read at once still shares commits."""
    monkeypatch.setenv("TENURE_TEST_HOME", str(short_home))
    owner = OwnerProcess(short_home, preload=RECORD_COMMITS).start()
    record = short_home / "commits"
    try:
        c = owner.client()
        gk = GuardianKey()
        try:
            epoch = gk.bootstrap(c, owner.instance)
            answer = c.call("launch", params(0), epoch=epoch)
            row = c.call("inspect", {"launch_key": "g0"})
            assert (row["state"], row["pid"]) == ("running", answer["pid"])
            assert record.read_text().split("\n")[:-1] == ["now", "now"]
            record.unlink()
            *answers, _inventory = asyncio.run(burst(str(owner.paths.sock), gk.signed,
                                                     epoch, list(range(1, N + 1))))
            assert not [a for a in answers if isinstance(a, BaseException)], answers
            groups = [int(ln.split()[1]) for ln in record.read_text().split("\n")
                      if ln.startswith("group")]
            assert max(groups) > 1, record.read_text()   # shared, not one commit each
            stop_all(c, epoch)
        finally:
            c.close()
    finally:
        assert owner.stop() == 0
