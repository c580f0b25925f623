"""Scheduled jobs: each due time of a template's cron schedule is admitted once.

The record of due time ``d`` has the key ``schedule:<stack>/<job>:<d in UTC>``, and the
template's mark (the last due time handled) advances in the same transaction as that
admission. So a generation that dies or hands over around a due time leaves either the
record and the mark, or neither: the next generation admits it (again, the key makes
that the same record) and never skips it.

A due time first seen more than :data:`LATE_AFTER` seconds after it passed was missed:
no backend was up (or none could act) then. The template's ``catch_up`` decides: the
run is admitted late, or a ``missed`` record says it did not happen. Both are records,
so nothing is skipped silently. A due time that finds its template at ``max_pending``
open records waits, with the mark, until one ends (past :data:`LATE_AFTER` it counts as
missed like any other). A template seen for the first time (or again after its
schedule was removed) starts counting from now; earlier due times are not runs it
missed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

from protocol.errors import JobQueueFull

from .ledger import Admission, make_spec
from .model import JobTemplate
from .runner import JobRunner

__all__ = ["LATE_AFTER", "MAX_PER_TICK", "Scheduler", "due_times", "schedule_key"]

log = logging.getLogger("tenure.jobs")

LATE_AFTER = 60.0
MAX_PER_TICK = 100     # due times handled per template per tick (a long outage catches up
                       # over several ticks instead of stalling the loop)


def due_times(cron: str, zone: str, after: float, until: float) -> Iterator[float]:
    """Due times (epoch seconds) of ``cron`` in ``zone`` with ``after < d <= until``,
    oldest first. Never raises for a validated expression and zone."""
    from zoneinfo import ZoneInfo  # here: a backend without schedules never loads it

    from cronsim import CronSim
    tz = ZoneInfo(zone)
    for dt in CronSim(cron, datetime.fromtimestamp(after, tz)):
        t = dt.timestamp()
        if t > until:
            return
        yield t


def schedule_key(template: JobTemplate, due: float) -> str:
    stamp = datetime.fromtimestamp(due, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"schedule:{template.key}:{stamp}"


class Scheduler:
    """Called by the runner's tick (never while draining or fenced) with the wall clock."""

    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner
        self.full: set[str] = set()   # templates whose last admission was refused (logged)

    def tick(self, now: float) -> None:
        ledger = self.runner.ledger
        scheduled = {t.key: t for t in self.runner.config().jobs() if t.schedule is not None}
        ledger.forget_schedules(keep=set(scheduled))
        for key, template in sorted(scheduled.items()):
            mark = ledger.schedule_mark(key)
            if mark is None:
                ledger.set_schedule_mark(key, now, now)
                continue
            self._admit_due(template, mark, now)

    def _admit_due(self, template: JobTemplate, mark: float, now: float) -> None:
        sched = template.schedule
        assert sched is not None
        for i, due in enumerate(due_times(sched.cron, sched.time_zone, mark, now)):
            if i >= MAX_PER_TICK:
                return
            late = now - due > LATE_AFTER
            missed = late and not sched.catch_up
            try:
                rec, dup = self.runner.ledger.admit(Admission(
                    template.stack, template.name, make_spec(template),
                    key=schedule_key(template, due), source="schedule", due_at=due,
                    missed=missed, mark=due, max_open=template.max_pending), now)
            except JobQueueFull as exc:
                if template.key not in self.full:
                    log.warning("job %s: %s; its due time %s waits (the mark stays)",
                                template.key, exc, schedule_key(template, due))
                self.full.add(template.key)
                return
            self.full.discard(template.key)
            if dup:
                continue
            if missed:
                log.warning("job %s: due at %s was missed (no backend was up); recorded "
                            "as job %d", template.key, schedule_key(template, due), rec.id)
            else:
                self.runner.track(rec)
                self.runner.wake()

