"""Retention on the runner's tick: each template's policy from the applied config (the
default for a template no longer configured), at most once a minute, finished records
only."""

from __future__ import annotations

import asyncio
from pathlib import Path

from backend.config import parse_config
from backend.jobs import machine as jm
from backend.jobs.ledger import Admission
from backend.jobs.retention import PRUNE_EVERY, Pruner
from backend.testing import FakeOwner, fake_generation

CONFIG = ('[stacks.s.jobs.keep2]\ncommand = ["x"]\nretention = { keep = 2 }\n'
          '[stacks.s.jobs.week]\ncommand = ["y"]\nretention = { days = 7 }\n')


def test_each_template_is_pruned_by_its_own_policy(tmp_path: Path) -> None:
    async def main() -> None:
        gen = fake_generation(tmp_path, FakeOwner(), CONFIG)
        jobs = gen.api.jobs
        try:
            def finished(template: str, at: float) -> int:
                spec = {"argv": [template], "env": {}, "cwd": None, "timeout": None,
                        "stop": {}, "after": []}
                rec, _ = jobs.ledger.admit(Admission("s", template, spec), at)
                jobs.clock.wall = lambda: at  # type: ignore[method-assign]
                jobs.apply(rec, jm.Withdraw())
                return rec.id
            keep2 = [finished("keep2", 1000.0 + i) for i in range(4)]
            week = [finished("week", 1000.0 + i) for i in range(4)]
            waiting, _ = jobs.submit("s/keep2", None, [])
            pruner = Pruner(jobs)
            now = 1000.0 + 7 * 86400 + 2.5
            pruner.tick(now)
            left = {r.id for r in jobs.ledger.records()}
            assert left == {*keep2[2:], *week[3:], waiting.id}
            assert pruner.pruned == 5
            gen.config = parse_config('[stacks.s.jobs.other]\ncommand = ["z"]\n', "u")
            for _ in range(100):
                finished("keep2", now)
            pruner.tick(now + PRUNE_EVERY / 2)                 # not yet: once a minute
            assert len(jobs.ledger.records(template="keep2", limit=1000)) == 103
            pruner.tick(now + PRUNE_EVERY)                     # gone from config: keep 100
            assert len(jobs.ledger.records(template="keep2", limit=1000)) == 101
            assert jobs.ledger.get(waiting.id).job.state is jm.State.ADMITTED
        finally:
            await gen.close()
    asyncio.run(main())
