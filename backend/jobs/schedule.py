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
schedule was removed), or whose cron expression or time zone changed, starts counting
from when that config was applied; earlier due times are not runs it missed.

A due time whose key is already held by a record of another submission (a client took
it before such keys were reserved, see backend.jobs.api) cannot be admitted: it is
recorded ``missed``, without a key, with that reason as its evidence, and the schedule
moves on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

from protocol.errors import Conflict, JobQueueFull, StateCorrupt

from .ledger import Admission, make_spec
from .model import JobTemplate
from .runner import JobRunner

__all__ = ["LATE_AFTER", "MAX_PER_TICK", "SCHEDULE_KEY_PREFIX", "Scheduler", "due_times",
           "schedule_form", "schedule_key"]

log = logging.getLogger("tenure.jobs")

LATE_AFTER = 60.0
SCHEDULE_KEY_PREFIX = "schedule:"   # the keys of scheduled runs; refused from clients
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
        if t <= after:
            # CronSim counts in local wall time: from ``after`` in the second pass of a
            # repeated hour (autumn, fold=1) it yields the first pass's time of that
            # hour, which is before ``after`` (before the schedule began, or a due time
            # already handled). A local time that happens twice runs once.
            continue
        if t > until:
            return
        yield t


def schedule_key(template: JobTemplate, due: float) -> str:
    stamp = datetime.fromtimestamp(due, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{SCHEDULE_KEY_PREFIX}{template.key}:{stamp}"


def schedule_form(template: JobTemplate) -> str:
    """What decides the template's due times: its cron expression and time zone."""
    sched = template.schedule
    assert sched is not None
    return json.dumps([sched.cron, sched.time_zone])


class Scheduler:
    """Called by the runner's tick (never while draining or fenced) with the wall clock."""

    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner
        self.full: set[str] = set()   # templates whose last admission was refused (logged)
        self.stopped: set[str] = set()   # templates whose stack is stopped (logged)

    def tick(self, now: float) -> None:
        ledger = self.runner.ledger
        scheduled = {t.key: t for t in self.runner.config().jobs() if t.schedule is not None}
        stopped = self.runner.stopped_stacks()
        ledger.forget_schedules(keep=set(scheduled))
        for key, template in sorted(scheduled.items()):
            mark, form = self._mark(key), ledger.schedule_form(key)
            current = schedule_form(template)
            if mark is None or form not in (None, current):
                if mark is not None:
                    log.info("job %s: its schedule changed (%s, was %s); its due times "
                             "count from when that was applied", key, current, form)
                mark = self._since(now)
                ledger.restart_schedule(key, current, mark, now)
            elif form is None:     # a mark from before forms were recorded: its form
                ledger.set_schedule_form(key, current)
            if mark > now + LATE_AFTER:
                mark = self._set_back(template, current, mark, now)
            if template.stack in stopped:
                self._pass_stopped(template, mark, now)
                continue
            self.stopped.discard(key)
            self._admit_due(template, mark, now)

    def _mark(self, key: str) -> float | None:
        """The template's mark; None, so that its due times count from now (as for a
        schedule seen first), for a damaged one, said in the log once: it raised out of
        every tick, and no schedule ran again. Its keys keep a due time it handled from
        running twice."""
        try:
            return self.runner.ledger.schedule_mark(key)
        except StateCorrupt as exc:
            log.error("%s: %s; its due times count from now", exc.code_str, exc.msg)
            return None

    def _set_back(self, template: JobTemplate, form: str, mark: float, now: float
                  ) -> float:
        """The mark, the last due time handled, is ahead of the clock: the wall clock was
        set back (it was ahead, and was corrected). Waiting for it to come round again
        ran nothing, unlogged, for as long as the clock had been ahead; the schedule
        counts from now instead. A due time admitted while the clock was ahead keeps its
        record, whose key finds it (it ran early, and does not run twice); one recorded
        ``missed`` then (the false now had passed it) never started: its key is released
        (Ledger.set_schedule_back), so it runs when the clock reaches it. Kept, it made
        every real due time of the jump a duplicate that never ran. Returns the new
        mark."""
        log.warning("job %s: its last due time handled (%s) is %.0f s ahead of the clock "
                    "(it was set back): its due times count from now", template.key,
                    schedule_key(template, mark), mark - now)
        released = self.runner.ledger.set_schedule_back(template.key, form, now, now)
        if released:
            log.warning("job %s: %d due time(s) recorded missed while the clock was ahead "
                        "have not come yet (jobs %s): they run when they come",
                        template.key, len(released), ", ".join(str(i) for i, _ in released))
        return now

    def _pass_stopped(self, template: JobTemplate, mark: float, now: float) -> None:
        """A stopped stack runs none of its schedules: the mark moves past each due time
        without a record (the operator stopped it; a backlog must not run at `stack
        start`, nor a record a minute pile up). Said once per stop."""
        sched = template.schedule
        assert sched is not None
        last = max(due_times(sched.cron, sched.time_zone, mark, now), default=None)
        if last is not None:
            self.runner.ledger.set_schedule_mark(template.key, last, now)
        if template.key not in self.stopped:
            log.info("job %s: its stack %s is stopped: its due times pass unrun until "
                     "`tenure stack start %s`", template.key, template.stack,
                     template.stack)
            self.stopped.add(template.key)

    def _since(self, now: float) -> float:
        """When the applied config took effect: its apply time when that was moments
        ago (a due time between the apply and this tick is the new schedule's), else
        ``now``."""
        applied = (self.runner.ledger.store.config() or {}).get("applied_at")
        if isinstance(applied, float | int) and 0 <= now - applied <= LATE_AFTER:
            return float(applied)
        return now

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
            except Conflict as exc:  # its key holds another submission: never admitted
                self._key_taken(template, due, exc, now)
                continue
            self.full.discard(template.key)
            if dup:
                continue
            if missed:
                log.warning("job %s: due at %s was missed (found %.0f s late: no backend "
                            "was up, or the clock jumped ahead); recorded as job %d",
                            template.key, schedule_key(template, due), now - due, rec.id)
            else:
                self.runner.track(rec)
                self.runner.wake()


    def _key_taken(self, template: JobTemplate, due: float, exc: Conflict, now: float
                   ) -> None:
        """Record a due time whose key another submission holds as ``missed`` (no key,
        the reason in its evidence) and move the mark past it, in one transaction: the
        schedule goes on, and says once why this run did not happen."""
        key = schedule_key(template, due)
        rec, _ = self.runner.ledger.admit(Admission(
            template.stack, template.name, make_spec(template), source="schedule",
            due_at=due, missed=True, mark=due, evidence={
                "reason": f"its key is held by another submission: {exc.msg}",
                "key": key, "conflict": exc.data}), now)
        log.error("job %s: due at %s was not run, its key is held by another submission "
                  "(%s); recorded as job %d (missed)", template.key, key, exc.msg, rec.id)
