"""Retention on the runner's tick: each template's policy from the applied config (the
default for a template no longer configured), at most once a minute, finished records
only, and each pruned record's output deleted in the owner's journal first: when the
owner call fails, the records stay and the next pass deletes both."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from backend.config import parse_config
from backend.jobs import machine as jm
from backend.jobs.ledger import Admission
from backend.jobs.retention import PRUNE_EVERY, Pruner
from backend.jobs.runner import JobRunner
from backend.testing import FakeOwner, fake_generation, until
from protocol.errors import StorageFailed, UnknownMethod

CONFIG = ('[stacks.s.jobs.keep2]\ncommand = ["x"]\nretention = { keep = 2 }\n'
          '[stacks.s.jobs.week]\ncommand = ["y"]\nretention = { days = 7 }\n')


def finished(jobs: JobRunner, template: str, at: float) -> int:
    spec = {"argv": [template], "env": {}, "cwd": None, "timeout": None, "stop": {},
            "after": []}
    rec, _ = jobs.ledger.admit(Admission("s", template, spec), at)
    jobs.clock.wall = lambda: at  # type: ignore[method-assign]
    jobs.apply(rec, jm.Withdraw())
    return rec.id


async def one_pass(pruner: Pruner, now: float, paced: bool = False) -> None:
    """A tick at wall time ``now``; unless ``paced``, once the minute between passes
    went by."""
    if not paced:
        pruner.last = float("-inf")
    pruner.tick(now)
    await until(lambda: not pruner.busy, "the prune pass")


def test_each_template_is_pruned_by_its_own_policy_with_its_output(tmp_path: Path) -> None:
    async def main() -> None:
        owner = FakeOwner()
        gen = fake_generation(tmp_path, owner, CONFIG)
        jobs = gen.api.jobs
        try:
            keep2 = [finished(jobs, "keep2", 1000.0 + i) for i in range(4)]
            week = [finished(jobs, "week", 1000.0 + i) for i in range(4)]
            waiting, _ = jobs.submit("s/keep2", None, [])
            pruner = Pruner(jobs)
            now = 1000.0 + 7 * 86400 + 2.5
            await one_pass(pruner, now)
            left = {r.id for r in jobs.ledger.records()}
            assert left == {*keep2[2:], *week[3:], waiting.id}
            assert pruner.pruned == 5
            assert owner.forgotten == {("s", "job:keep2", i) for i in keep2[:2]} | \
                {("s", "job:week", i) for i in week[:3]}
            assert all(e == owner.epoch for m, _, e in owner.calls if m == "logs.forget")
            gen.config = parse_config('[stacks.s.jobs.other]\ncommand = ["z"]\n', "u")
            for _ in range(100):
                finished(jobs, "keep2", now)
            mono = pruner.last
            jobs.clock.mono = lambda: mono + PRUNE_EVERY / 2  # type: ignore[method-assign]
            await one_pass(pruner, now - 3600, paced=True)   # not yet: once a minute
            assert len(jobs.ledger.records(template="keep2", limit=1000)) == 103
            jobs.clock.mono = lambda: mono + PRUNE_EVERY  # type: ignore[method-assign]
            await one_pass(pruner, now - 3600, paced=True)   # the wall clock set back an
            # hour does not hold it up; gone from config: keep 100
            assert len(jobs.ledger.records(template="keep2", limit=1000)) == 101
            assert jobs.ledger.get(waiting.id).job.state is jm.State.ADMITTED
            assert ("s", "job:keep2", waiting.id) not in owner.forgotten
        finally:
            await gen.close()
    asyncio.run(main())


def test_an_owner_that_fails_to_forget_keeps_the_records_for_the_next_pass(
        tmp_path: Path) -> None:
    async def main() -> None:
        owner = FakeOwner()
        gen = fake_generation(tmp_path, owner, CONFIG)
        jobs = gen.api.jobs
        try:
            keep2 = [finished(jobs, "keep2", 1000.0 + i) for i in range(4)]
            week = [finished(jobs, "week", 1000.0 + i) for i in range(4)]

            def broken(method: str, params: dict[str, Any]) -> None:
                if method == "logs.forget" and params["sources"][0]["app"] == "job:keep2":
                    raise StorageFailed("journal: disk full")
            owner.before = broken
            pruner = Pruner(jobs)
            now = 1000.0 + 7 * 86400 + 2.5
            await one_pass(pruner, now)
            left = {r.id for r in jobs.ledger.records()}
            assert left == {*keep2, *week[3:]}           # keep2's stay; week went on
            assert (pruner.failures, pruner.pruned) == (1, 3)
            assert not any(a == "job:keep2" for _, a, _ in owner.forgotten)

            owner.before = None                            # the owner works again
            await one_pass(pruner, now + PRUNE_EVERY)
            assert {r.id for r in jobs.ledger.records()} == set(keep2[2:])  # week's too old
            assert {("s", "job:keep2", i) for i in keep2[:2]} <= owner.forgotten
        finally:
            await gen.close()
    asyncio.run(main())


def test_records_go_after_their_output_and_a_repeated_forget_is_harmless(
        tmp_path: Path) -> None:
    """The backend died after the owner forgot and before the records went: the next
    pass forgets again (nothing left: 0 lines) and deletes them."""
    async def main() -> None:
        owner = FakeOwner()
        gen = fake_generation(tmp_path, owner, CONFIG)
        jobs = gen.api.jobs
        try:
            ids = [finished(jobs, "keep2", 1000.0 + i) for i in range(3)]
            seen: list[set[int]] = []

            def look(method: str, params: dict[str, Any]) -> None:
                if method == "logs.forget":   # the records are still there when it asks
                    seen.append({r.id for r in jobs.ledger.records()})
            owner.before = look
            owner.forgotten.add(("s", "job:keep2", ids[0]))  # forgotten by a pass cut short
            pruner = Pruner(jobs)
            await one_pass(pruner, 2000.0)
            assert seen == [set(ids)]
            assert {r.id for r in jobs.ledger.records()} == set(ids[1:])
            assert pruner.forgotten == 0                      # the fake: nothing new
        finally:
            await gen.close()
    asyncio.run(main())


def test_an_owner_without_logs_forget_prunes_records_as_before(tmp_path: Path) -> None:
    async def main() -> None:
        owner = FakeOwner()
        gen = fake_generation(tmp_path, owner, CONFIG)
        jobs = gen.api.jobs
        try:
            ids = [finished(jobs, "keep2", 1000.0 + i) for i in range(3)]

            def old_owner(method: str, params: dict[str, Any]) -> None:
                if method == "logs.forget":
                    raise UnknownMethod("no method 'logs.forget'")
            owner.before = old_owner
            pruner = Pruner(jobs)
            await one_pass(pruner, 2000.0)
            assert {r.id for r in jobs.ledger.records()} == set(ids[1:])
            await one_pass(pruner, 2000.0 + PRUNE_EVERY)
            assert len(owner.sent("logs.forget")) == 1        # not asked again
        finally:
            await gen.close()
    asyncio.run(main())
