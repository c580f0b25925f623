"""Retention: finished job records are pruned by their template's policy, with their
output in the owner's journal.

Only terminal records are ever pruned (never ``admitted``, ``starting``, ``running`` or
``recovery_required`` ones), with their history; their dedup keys stay in the ledger, so
a pruned key is refused instead of admitted again as new.

A record's output is the journal source ``(stack, job:<name>, record id)`` (every
attempt). The order makes a failure retryable: the owner deletes the output first
(``logs.forget``, idempotent, in bounded steps), and only once it answered are the
records deleted. If the owner call fails (or the backend dies in between), the records
stay and the next pass asks again; a record is never gone while its output is left
behind with nothing that could still delete it. An owner that predates ``logs.forget``
(``UNKNOWN_METHOD``) keeps the earlier behaviour: the records go and their output ages
out of the journal's per-source byte budget.
"""

from __future__ import annotations

import logging
import os

from protocol.errors import ShuttingDown, StaleEpoch, TenureError, UnknownMethod

from .model import Retention
from .runner import STEP_PREFIX, JobRunner, journal_app

__all__ = ["PRUNE_EVERY", "Pruner", "prune_every"]

log = logging.getLogger("tenure.jobs")

PRUNE_EVERY = 60.0
FORGET_BATCH = 500          # records per logs.forget call (the owner takes up to 1000)


def prune_every() -> float:
    """:data:`PRUNE_EVERY`, or ``TENURE_JOB_PRUNE_EVERY`` seconds (a test knob: integration
    tests cannot wait a minute); an invalid value is ignored."""
    try:
        value = float(os.environ.get("TENURE_JOB_PRUNE_EVERY") or PRUNE_EVERY)
    except ValueError:
        return PRUNE_EVERY
    return value if value > 0 else PRUNE_EVERY


class Pruner:
    """Called by the runner's tick with the wall clock. Every :func:`prune_every` seconds
    a pass runs in the background (a drain-barrier step, so a handoff waits for it):
    each template's finished records beyond its policy go, output first; records of a
    template no longer configured follow the default policy."""

    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner
        self.every = prune_every()
        self.last = float("-inf")   # runner.clock.mono() at the last pass
        self.pruned = 0             # records deleted by this generation
        self.forgotten = 0          # journal lines the owner deleted for them
        self.failures = 0           # passes cut short by an owner call that failed
        self.busy = False
        self._no_forget = False     # the owner predates logs.forget

    def tick(self, now: float) -> None:
        """A pass once every ``every`` seconds, paced on the monotonic clock (on the wall
        clock one set back an hour paused pruning for that hour); ``now``, the wall
        time, is what a record's age is measured against."""
        mono = self.runner.clock.mono()
        if self.busy or mono - self.last < self.every:
            return
        self.last = mono
        self.busy = True
        self.runner.spawn(self._pass(now))

    async def _pass(self, now: float) -> None:
        try:
            with self.runner.gate.step(f"{STEP_PREFIX}prune"):
                await self.prune_all(now)
        except ShuttingDown:
            pass  # a drain began: the next pass (here or in the next generation) does it
        finally:
            self.busy = False

    async def prune_all(self, now: float) -> None:
        """One pass over every template with records. An owner call that fails leaves
        the rest of that template's records for the next pass; the other templates go
        on."""
        config, ledger = self.runner.config(), self.runner.ledger
        for stack, name in ledger.templates():
            template = config.job(stack, name)
            policy = template.retention if template is not None else Retention()
            ids = ledger.prunable(stack, name, policy, now)
            for i in range(0, len(ids), FORGET_BATCH):
                batch = ids[i:i + FORGET_BATCH]
                if self.runner.fenced:
                    return
                if not await self._forget(stack, name, batch):
                    break
                gone = ledger.drop(batch, now)
                if gone:
                    self.pruned += len(gone)
                    log.info("job %s/%s: pruned %d finished records (%d..%d)", stack, name,
                             len(gone), gone[0], gone[-1])

    async def _forget(self, stack: str, name: str, ids: list[int]) -> bool:
        """Ask the owner to delete these records' output. True when it did (or cannot:
        an older owner); False when the records must stay for the next pass."""
        if self._no_forget:
            return True
        sources = [{"stack": stack, "app": journal_app(name), "instance": i} for i in ids]
        try:
            res = await self.runner.owner.call("logs.forget", {"sources": sources},
                                               epoch=self.runner.epoch)
        except UnknownMethod:
            self._no_forget = True
            log.warning("the owner predates logs.forget: pruned job records leave their "
                        "output to the journal's byte budget")
            return True
        except StaleEpoch as exc:
            self.runner.sup.fence(f"the owner refused logs.forget: {exc.msg}")
            return False
        except TenureError as exc:
            self.failures += 1
            log.warning("job %s/%s: the owner did not delete the output of %d records "
                        "(%s); they are kept for the next pass", stack, name, len(ids), exc)
            return False
        self.forgotten += int(res.get("deleted", 0))
        return True
