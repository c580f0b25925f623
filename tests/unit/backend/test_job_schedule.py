"""Scheduled jobs with a fake clock: each due time is admitted once under
``schedule:<template>:<due>``, a due time found late is admitted or recorded ``missed``
by ``catch_up``, the mark and the admission are one transaction, time zones follow
daylight saving, a template counts from when it is first seen or its expression
changed, a due time whose key another submission holds is recorded missed, and a
clock set back releases the keys of due times recorded missed while it was ahead."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from backend.config import parse_config
from backend.generation import Generation
from backend.jobs import machine as jm
from backend.jobs.ledger import Admission, make_spec
from backend.jobs.schedule import LATE_AFTER, MAX_PER_TICK, Scheduler, due_times
from backend.testing import FakeOwner, fake_generation

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC).timestamp()   # a Monday, 10:00 UTC


def config(cron: str = "*/5 * * * *", catch_up: bool = False, zone: str = "UTC") -> str:
    return (f'[stacks.s.jobs.report]\ncommand = ["report"]\nschedule = "{cron}"\n'
            f'time_zone = "{zone}"\ncatch_up = {str(catch_up).lower()}\n'
            "max_concurrent = 64\n")


def run(tmp_path: Path, text: str, body: Callable[[Generation, Scheduler], Any]) -> None:
    async def main() -> None:
        gen = fake_generation(tmp_path, FakeOwner(), text)
        try:
            body(gen, Scheduler(gen.api.jobs))
        finally:
            await gen.close()
    asyncio.run(main())


def records(gen: Generation) -> list[tuple[str | None, str, float | None]]:
    return [(r.key, r.job.state.value, r.due_at)
            for r in reversed(gen.api.jobs.ledger.records(limit=1000))]


def test_each_due_time_is_admitted_once(tmp_path: Path) -> None:
    def body(gen: Generation, sched: Scheduler) -> None:
        sched.tick(T0 + 1)                      # first seen: counting starts now
        assert records(gen) == []
        sched.tick(T0 + 299)
        assert records(gen) == []
        for t in (T0 + 300, T0 + 301, T0 + 310):
            sched.tick(t)
        assert records(gen) == [("schedule:s/report:2026-03-02T10:05:00Z", "admitted",
                                 T0 + 300)]
        sched.tick(T0 + 600 + 30)
        sched.tick(T0 + 900)
        assert [k for k, _, _ in records(gen)] == [
            "schedule:s/report:2026-03-02T10:05:00Z", "schedule:s/report:2026-03-02T10:10:00Z",
            "schedule:s/report:2026-03-02T10:15:00Z"]
        assert gen.api.jobs.ledger.schedule_mark("s/report") == T0 + 900
        assert all(r.source == "schedule" for r in gen.api.jobs.ledger.records())
        assert len(gen.api.jobs.records) == 3                  # tracked for starting
    run(tmp_path, config(), body)


def test_a_mark_left_behind_readmits_nothing_new(tmp_path: Path) -> None:
    """A generation that died after the admission commit: the key finds the record."""
    def body(gen: Generation, sched: Scheduler) -> None:
        sched.tick(T0)
        sched.tick(T0 + 300)
        gen.store.db.execute("UPDATE job_schedules SET last_due = ?", (T0,))  # type: ignore[union-attr]
        sched.tick(T0 + 305)
        assert len(records(gen)) == 1 and gen.api.jobs.ledger.schedule_mark("s/report") \
            == T0 + 300
    run(tmp_path, config(), body)


def test_late_due_times_are_missed_without_catch_up(tmp_path: Path) -> None:
    def body(gen: Generation, sched: Scheduler) -> None:
        sched.tick(T0)
        sched.tick(T0 + 600 + LATE_AFTER + 1)      # 10:05 late, 10:10 late by 61 s
        assert [(s, d) for _, s, d in records(gen)] == [("missed", T0 + 300),
                                                       ("missed", T0 + 600)]
        missed = gen.api.jobs.ledger.records()[0]
        assert (missed.job.outcome, missed.job.attempt) == (jm.Outcome.MISSED, 0)
        assert gen.api.jobs.records == {}
        sched.tick(T0 + 900 + 5)                   # on time again
        assert records(gen)[-1][1] == "admitted"
    run(tmp_path, config(), body)


def test_late_due_times_are_admitted_with_catch_up(tmp_path: Path) -> None:
    def body(gen: Generation, sched: Scheduler) -> None:
        sched.tick(T0)
        sched.tick(T0 + 3600)
        assert [s for _, s, _ in records(gen)] == ["admitted"] * 12
    run(tmp_path, config(catch_up=True), body)


def test_a_long_outage_catches_up_over_ticks(tmp_path: Path) -> None:
    def body(gen: Generation, sched: Scheduler) -> None:
        sched.tick(T0)
        sched.tick(T0 + 86400)                     # 288 due times
        assert len(records(gen)) == MAX_PER_TICK
        sched.tick(T0 + 86400)
        sched.tick(T0 + 86400)
        assert len(records(gen)) == 288 and len({k for k, _, _ in records(gen)}) == 288
    run(tmp_path, config(), body)


def test_a_clock_set_back_restarts_the_schedule_from_now(tmp_path: Path) -> None:
    """The clock was a day ahead for ten minutes, then corrected. Was: the mark stayed a
    day ahead and nothing was admitted, or logged, until the clock came round to it."""
    def body(gen: Generation, sched: Scheduler) -> None:
        ahead = T0 + 86_400
        sched.tick(ahead)
        sched.tick(ahead + 600)                    # 2 due times at the wrong clock
        assert len(records(gen)) == 2
        sched.tick(T0 + 610)                       # corrected: counts from now
        assert gen.api.jobs.ledger.schedule_mark("s/report") == T0 + 610
        sched.tick(T0 + 900)
        assert records(gen)[-1] == ("schedule:s/report:2026-03-02T10:15:00Z", "admitted",
                                    T0 + 900)
        sched.tick(T0 + 900 - 30)                  # a step back of 30 s: the mark stays
        assert gen.api.jobs.ledger.schedule_mark("s/report") == T0 + 900
        assert len(records(gen)) == 3
    run(tmp_path, config(), body)


def test_due_times_missed_while_the_clock_was_ahead_run_once_it_is_corrected(
        tmp_path: Path) -> None:
    """The clock ran an hour ahead, then was set back. Was: the due times between the
    mark and the false now were recorded `missed`, and when the real clock reached them
    their keys found those records: none of them ran. (11:00, due at the false now, ran
    an hour early and does not run again.)"""
    def body(gen: Generation, sched: Scheduler) -> None:
        sched.tick(T0)
        sched.tick(T0 + 3600)                      # ahead: 10:05-10:55 missed, 11:00 runs
        assert [s for _, s, _ in records(gen)] == ["missed"] * 11 + ["admitted"]
        sched.tick(T0 + 5)                         # set back: counts from now
        for t in range(6, 3601):
            sched.tick(T0 + t)
        ran = [(k, due) for k, s, due in records(gen) if s == "admitted"]
        assert sorted(due for _, due in ran) == [T0 + 300 * i for i in range(1, 13)]
        assert all(k == sched_key(due) for k, due in ran)
        missed = [r for r in gen.api.jobs.ledger.records(limit=1000)
                  if r.job.state is jm.State.MISSED]
        assert len(missed) == 11 and all(r.key is None for r in missed)
        released = gen.api.jobs.ledger.history(missed[0].id)[-1]
        assert (released["event"], released["detail"]["key"]) == (
            "KeyReleased", sched_key(missed[0].due_at))
        assert gen.api.jobs.ledger.schedule_mark("s/report") == T0 + 3600
    run(tmp_path, config(), body)


def sched_key(due: float | None) -> str:
    assert due is not None
    stamp = datetime.fromtimestamp(due, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"schedule:s/report:{stamp}"


def test_a_template_counts_from_when_it_is_first_seen_again(tmp_path: Path) -> None:
    def body(gen: Generation, sched: Scheduler) -> None:
        sched.tick(T0)
        gen.config = parse_config('[stacks.s.jobs.report]\ncommand = ["report"]\n', "u")
        sched.tick(T0 + 3600)                      # no schedule now: mark forgotten
        assert gen.api.jobs.ledger.schedule_mark("s/report") is None
        gen.config = parse_config(config(), "u")
        sched.tick(T0 + 7200)
        sched.tick(T0 + 7200 + 10)
        assert records(gen) == []
    run(tmp_path, config(), body)


def test_a_due_time_before_the_schedule_began_is_not_admitted_in_a_repeated_hour(
        tmp_path: Path) -> None:
    """First seen at 01:10 EST, in the second pass of the repeated hour. Was: CronSim went
    back to the first pass, and 01:30 EDT (05:30Z, before the schedule began) was
    admitted as a late due time under catch_up."""
    def body(gen: Generation, sched: Scheduler) -> None:
        first = datetime(2025, 11, 2, 1, 10, tzinfo=ZoneInfo("America/New_York"),
                         fold=1).timestamp()
        sched.tick(first)
        sched.tick(first + 1)
        assert records(gen) == []
        assert list(due_times("30 1 * * *", "America/New_York", first, first + 2 * 86400)) \
            == [datetime(2025, 11, 3, 6, 30, tzinfo=UTC).timestamp()]
    run(tmp_path, config("30 1 * * *", catch_up=True, zone="America/New_York"), body)


def test_time_zones_and_daylight_saving() -> None:
    riga = "Europe/Riga"
    autumn = datetime(2026, 10, 24, 12, tzinfo=UTC).timestamp()
    got = list(due_times("30 3 * * *", riga, autumn, autumn + 3 * 86400))
    # 03:30 local happens twice on 25 October (clocks go back at 04:00): one run
    assert [datetime.fromtimestamp(t, UTC).strftime("%d %H:%M") for t in got] == \
        ["25 00:30", "26 01:30", "27 01:30"]
    spring = datetime(2026, 3, 28, 12, tzinfo=UTC).timestamp()
    got = list(due_times("30 3 * * *", riga, spring, spring + 2 * 86400))
    # 03:30 does not exist on 29 March (03:00 jumps to 04:00): it runs at 04:00
    assert [datetime.fromtimestamp(t, UTC).strftime("%d %H:%M") for t in got] == \
        ["29 01:00", "30 00:30"]
    assert list(due_times("0 9 * * MON", "UTC", T0, T0 + 7 * 86400)) == [T0 + 7 * 86400 - 3600]


def test_a_due_time_whose_key_another_submission_holds_is_missed_and_the_schedule_goes_on(
        tmp_path: Path) -> None:
    """A ledger holding a client record under a future due time's key with other
    arguments (possible before such keys were reserved): that due time is recorded
    ``missed`` once, with the reason, and the next one runs; the tick never raises."""
    def body(gen: Generation, sched: Scheduler) -> None:
        ledger = gen.api.jobs.ledger
        sched.tick(T0)
        template = gen.config.job("s", "report")
        assert template is not None
        taken = "schedule:s/report:2026-03-02T10:05:00Z"
        manual, _ = ledger.admit(Admission("s", "report", make_spec(template, ["manual"]),
                                           key=taken), T0 + 1)
        sched.tick(T0 + 301)
        sched.tick(T0 + 302)                      # once: the mark moved past it
        assert ledger.schedule_mark("s/report") == T0 + 300
        got = records(gen)
        assert got == [(taken, "admitted", None), (None, "missed", T0 + 300)]
        missed = ledger.records()[0]
        assert missed.source == "schedule" and missed.job.evidence is not None
        assert missed.job.evidence["key"] == taken
        assert missed.job.evidence["conflict"]["job"] == manual.id
        assert "held by another submission" in missed.job.evidence["reason"]
        sched.tick(T0 + 601)
        assert records(gen)[-1] == ("schedule:s/report:2026-03-02T10:10:00Z", "admitted",
                                    T0 + 600)
    run(tmp_path, config(), body)


def test_a_changed_expression_counts_from_when_it_was_applied(tmp_path: Path) -> None:
    """A schedule whose expression changes replays none of the new expression's due
    times from before the change (catch_up or not: they were never scheduled)."""
    def body(gen: Generation, sched: Scheduler) -> None:
        sched.tick(T0)
        sched.tick(T0 + 120)
        gen.config = parse_config(config("* * * * *", catch_up=True), "u")
        sched.tick(T0 + 180.5)
        assert records(gen) == []
        assert gen.api.jobs.ledger.schedule_mark("s/report") == T0 + 180.5
        sched.tick(T0 + 240)
        assert records(gen) == [("schedule:s/report:2026-03-02T10:04:00Z", "admitted",
                                 T0 + 240)]
    run(tmp_path, config("0 0 1 1 *", catch_up=True), body)


def test_a_changed_time_zone_counts_from_when_it_was_applied(tmp_path: Path) -> None:
    def body(gen: Generation, sched: Scheduler) -> None:
        sched.tick(T0 - 3 * 3600)                 # 07:00 UTC; due 12:00 UTC
        gen.config = parse_config(config("0 12 * * *", zone="Asia/Dubai"), "u")
        sched.tick(T0 + 3600)                     # 11:00 UTC: 12:00 Dubai was 08:00 UTC
        assert records(gen) == []
        sched.tick(T0 + 22 * 3600)                # 08:00 UTC the next day
        assert records(gen) == [("schedule:s/report:2026-03-03T08:00:00Z", "admitted",
                                 T0 + 22 * 3600)]
    run(tmp_path, config("0 12 * * *"), body)


def test_a_due_time_between_the_apply_and_the_next_tick_is_the_new_schedules(
        tmp_path: Path) -> None:
    def body(gen: Generation, sched: Scheduler) -> None:
        sched.tick(T0)
        gen.config = parse_config(config("* * * * *"), "u")
        with gen.store.tx() as db:                # type: ignore[union-attr]
            gen.store.set_config(db, "text", "u", "rev-2")  # type: ignore[union-attr]
            db.execute("UPDATE config SET applied_at = ?", (T0 + 179.6,))
        sched.tick(T0 + 180.4)                    # 10:03:00 came 0.4 s after the apply
        assert records(gen) == [("schedule:s/report:2026-03-02T10:03:00Z", "admitted",
                                 T0 + 180)]
    run(tmp_path, config("0 0 1 1 *"), body)


def test_a_mark_from_before_forms_were_recorded_keeps_counting(tmp_path: Path) -> None:
    """An upgrade from a release that kept no forms loses no due time."""
    def body(gen: Generation, sched: Scheduler) -> None:
        sched.tick(T0)
        gen.store.db.execute("DELETE FROM job_schedule_forms")  # type: ignore[union-attr]
        sched.tick(T0 + 300)
        assert [k for k, _, _ in records(gen)] == ["schedule:s/report:2026-03-02T10:05:00Z"]
        assert gen.api.jobs.ledger.schedule_form("s/report") == '["*/5 * * * *", "UTC"]'
    run(tmp_path, config(), body)


def test_a_stopped_stack_runs_no_due_time_and_starts_no_backlog(tmp_path: Path) -> None:
    """Its due times were admitted every time and all ran at once at `stack start` (a
    week's stop: seven nightly reports; up to max_pending records)."""
    def body(gen: Generation, sched: Scheduler) -> None:
        runner = gen.api.jobs
        sched.tick(T0)
        runner.stopped_stacks = lambda: {"s"}
        for t in range(300, 3000, 300):            # nine due times while stopped
            sched.tick(T0 + t + 1)
        assert records(gen) == []
        assert gen.api.jobs.ledger.schedule_mark("s/report") == T0 + 2700
        runner.stopped_stacks = lambda: set()
        sched.tick(T0 + 2701)
        assert records(gen) == []                  # no backlog at the start
        sched.tick(T0 + 3000)
        assert records(gen) == [("schedule:s/report:2026-03-02T10:50:00Z", "admitted",
                                 T0 + 3000)]
    run(tmp_path, config(catch_up=True), body)


def test_a_damaged_mark_counts_that_schedule_from_now_and_stops_no_other(
        tmp_path: Path, caplog: Any) -> None:
    """Was: ``float()`` of one damaged mark raised out of every tick: no template's due
    time ran again, and the log had one uncoded traceback."""
    two = config() + ('[stacks.s.jobs.other]\ncommand = ["other"]\nschedule = "*/5 * * * *"\n'
                      'time_zone = "UTC"\n')

    def body(gen: Generation, sched: Scheduler) -> None:
        sched.tick(T0)
        for bad in ("garbage", float("inf"), -1.0, b"\x01"):
            gen.store.db.execute("UPDATE job_schedules SET last_due = ? "  # type: ignore[union-attr]
                                 "WHERE template = 's/report'", (bad,))
            sched.tick(T0 + 1)
            assert gen.api.jobs.ledger.schedule_mark("s/report") == T0 + 1
        sched.tick(T0 + 300)
        assert sorted(k for k, _, _ in records(gen)) == [
            "schedule:s/other:2026-03-02T10:05:00Z", "schedule:s/report:2026-03-02T10:05:00Z"]
        said = [r.getMessage() for r in caplog.records if "STATE_CORRUPT" in r.getMessage()]
        assert len(said) == 4 and "s/report" in said[0] and "count from now" in said[0], said
    run(tmp_path, two, body)
