"""Retention: finished job records are pruned by their template's policy.

Only terminal records are ever pruned (never ``admitted``, ``starting``, ``running`` or
``recovery_required`` ones), with their history; their dedup keys stay in the ledger, so
a pruned key is refused instead of admitted again as new. Their output stays in the
owner's journal, which bounds each journal source by bytes (every run of a template
shares the source ``job:<name>``): it ages out there, not here.
"""

from __future__ import annotations

import logging

from .model import Retention
from .runner import JobRunner

__all__ = ["PRUNE_EVERY", "Pruner"]

log = logging.getLogger("tenure.jobs")

PRUNE_EVERY = 60.0


class Pruner:
    """Called by the runner's tick with the wall clock. Every :data:`PRUNE_EVERY`
    seconds each template's finished records beyond its policy go
    (backend.jobs.ledger.Ledger.prune); records of a template no longer configured
    follow the default policy."""

    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner
        self.last = 0.0
        self.pruned = 0

    def tick(self, now: float) -> None:
        if now - self.last < PRUNE_EVERY:
            return
        self.last = now
        config, ledger = self.runner.config(), self.runner.ledger
        for stack, name in ledger.templates():
            template = config.job(stack, name)
            policy = template.retention if template is not None else Retention()
            gone = ledger.prune(stack, name, policy, now)
            if gone:
                self.pruned += len(gone)
                log.info("job %s/%s: pruned %d finished records (%d..%d)", stack, name,
                         len(gone), gone[0], gone[-1])
