"""How a new backend generation takes over the open job records of the ledger.

A record in ``running`` was started (its pid came from the owner): it is live in the
owner's inventory, or its exit is in the owner's observations, or the owner's launch row
for its key — which exists, so asking for it again can only return the first result —
says how it ended.

A record in ``starting`` belongs to a generation that asked the owner to launch it and
stopped before it heard the answer (a handoff never leaves one: a start is a drain step).
This generation holds a newer epoch, so the old request can no longer land; but this
generation never sends a launch it did not decide itself. It looks for proof only: the
key live in the inventory, or a ``launched``, ``exit`` or ``launch_failed`` observation
for it. Without proof the record becomes ``recovery_required`` with the evidence, and
waits for ``tenure job resolve``.

The same evidence guards ``resolve --not-started``: it is refused while the owner shows
any sign of that launch.
"""

from __future__ import annotations

import logging
from typing import Any

from protocol.errors import Conflict, TenureError

from . import machine as jm
from .ledger import Record
from .runner import JobRunner, events_of_row, exit_event, owner_time

__all__ = ["Evidence", "audit", "resolve", "resume"]

log = logging.getLogger("tenure.jobs")

RING_PAGE = 10_000


class Evidence:
    """What the owner shows about launch keys right now: its live inventory and every
    event of its observation ring (with whether the ring lost older events)."""

    def __init__(self, live: list[dict[str, Any]], events: list[dict[str, Any]],
                 gap: bool, newest: int) -> None:
        self.live = {r["launch_key"]: r for r in live}
        self.gap = gap
        self.newest = newest
        self.seen: dict[str, dict[str, dict[str, Any]]] = {}
        for e in events:
            if "launch_key" in e and e.get("kind") in ("launched", "exit", "launch_failed"):
                self.seen.setdefault(e["launch_key"], {})[e["kind"]] = e

    @classmethod
    async def gather(cls, runner: JobRunner) -> Evidence:
        """Read the owner (read-only calls). Raises TenureError."""
        live = (await runner.owner.call("inventory"))["launches"]
        events: list[dict[str, Any]] = []
        after, gap, newest = 0, False, 0
        while True:
            batch = await runner.owner.call("observations.read",
                                            {"after": after, "limit": RING_PAGE})
            gap = gap or bool(batch.get("gap"))
            events += batch["events"]
            newest = int(batch.get("newest", batch["cursor"]))
            if not batch["events"] or batch["cursor"] >= newest:
                return cls(live, events, gap, newest)
            after = batch["cursor"]

    def of(self, key: str) -> dict[str, Any]:
        """Everything shown about ``key``."""
        return {"live": self.live.get(key), "events": self.seen.get(key, {}),
                "observations_newest": self.newest, "observation_gap": self.gap}


async def resume(runner: JobRunner) -> dict[str, list[int]]:
    """Load every open record and settle the ones a previous generation left mid-way.
    Returns what was decided, by outcome. Raises TenureError (nothing decided) when the
    owner cannot be read."""
    # a record admitted through the API since it opened is already tracked: keep that
    # object (two objects of one record would fight over its revision)
    recs = [runner.records.get(r.id) or r for r in runner.ledger.open_records()]
    for rec in recs:
        runner.track(rec)
    pending = [r for r in recs if r.job.state in (jm.State.STARTING, jm.State.RUNNING)]
    report: dict[str, list[int]] = {"running": [], "ended": [], "recovery_required": []}
    if not pending:
        return report
    evidence = await Evidence.gather(runner)
    for rec in pending:
        try:
            if rec.job.state is jm.State.STARTING:
                _settle_start(runner, rec, evidence)
            else:
                await _settle_running(runner, rec, evidence)
        except Conflict:
            continue  # another writer holds it
        state = rec.job.state
        key = "running" if state is jm.State.RUNNING else state.value \
            if state is jm.State.RECOVERY_REQUIRED else "ended"
        report[key].append(rec.id)
    if report["recovery_required"]:
        log.error("jobs %s: start uncertain; `tenure job show ID` has the evidence, "
                  "`tenure job resolve ID` decides", report["recovery_required"])
    return report


def _settle_start(runner: JobRunner, rec: Record, ev: Evidence) -> None:
    key = rec.job.launch_key
    assert key is not None
    seen = ev.seen.get(key, {})
    proof = {"proof": ev.of(key)}
    if "exit" in seen:
        launched = seen.get("launched")   # without it, when it started is unknown
        first = launched or seen["exit"]
        at = None if launched is None else owner_time(launched.get("at"))
        runner.apply(rec, jm.Launched(int(first["pid"]), int(first.get("start_ticks", 0)),
                                      at), proof)
        _apply_exit(runner, rec, seen["exit"])
    elif key in ev.live:
        row = ev.live[key]
        runner.apply(rec, jm.Launched(int(row["pid"]), int(row["start_ticks"]),
                                      owner_time(row.get("started_at"))), proof)
    elif "launch_failed" in seen:
        e = seen["launch_failed"]
        runner.apply(rec, jm.LaunchRefused(str(e.get("code")), str(e.get("msg"))), proof)
    elif "launched" in seen:
        e = seen["launched"]
        runner.apply(rec, jm.Launched(int(e["pid"]), int(e["start_ticks"]),
                                      owner_time(e.get("at"))), proof)
        runner.apply(rec, jm.Lost({"reason": "launched, then gone; its exit is not in "
                                   "the owner's observations", **ev.of(key)}))
    else:
        runner.apply(rec, jm.Uncertain({
            "reason": "the generation that asked the owner to launch this job stopped "
                      "before it heard the answer, and the owner shows no sign of the "
                      "launch (not live, no launch or exit observed)",
            "launch_key": key, "attempt": rec.job.attempt, "epoch": runner.epoch,
            "checked_at": runner.clock.wall(), **ev.of(key)}))


async def _settle_running(runner: JobRunner, rec: Record, ev: Evidence) -> None:
    key = rec.job.launch_key
    assert key is not None
    seen = ev.seen.get(key, {})
    if "exit" in seen:
        _apply_exit(runner, rec, seen["exit"])
        return
    row = ev.live.get(key)
    if row is not None and (row["pid"], row["start_ticks"]) == (rec.job.pid,
                                                                rec.job.start_ticks):
        return  # still running: its exit comes through the observation stream
    # it ended while no backend watched and its exit left the ring: the owner's row for
    # this key (recorded: it gave us the pid) says how
    try:
        row = await runner.owner.call("launch", runner.launch_params(rec),
                                      epoch=runner.epoch)
        events = events_of_row(row)
        if row.get("state") == "running":  # a row of an owner that is gone: not live
            events.append(jm.Lost({"reason": "the owner's row says running, but the key "
                                   "is not in its live inventory", "row": row}))
    except TenureError as exc:
        events = [jm.Lost({"reason": f"gone, and the owner's row is unreadable: {exc}",
                           **ev.of(key)})]
    for e in events:
        runner.apply(rec, e, {"proof": "the owner's launch row"})


async def audit(runner: JobRunner, why: str = "was not observed here") -> list[int]:
    """Settle running records whose process the owner no longer runs but whose exit this
    generation did not see (an observation can be lost, e.g. one that arrived as a drain
    froze the reader and the drain was then aborted, or in an observation gap). Returns
    the ids settled; the log says ``why`` the exit was missed. Raises TenureError when
    the owner cannot be read."""
    running = [r for r in runner.records.values() if r.job.state is jm.State.RUNNING]
    if not running:
        return []
    live = {r["launch_key"] for r in (await runner.owner.call("inventory"))["launches"]}
    if all(r.job.launch_key in live for r in running):
        return []
    evidence = await Evidence.gather(runner)   # the ring has every exit before the
    settled = []                               # inventory stops listing its launch
    for rec in running:
        if rec.job.state is jm.State.RUNNING and rec.job.launch_key not in evidence.live:
            try:
                await _settle_running(runner, rec, evidence)
            except Conflict:
                continue
            log.warning("job %d: its exit %s; settled from the owner (%s)",
                        rec.id, why, rec.job.state)
            settled.append(rec.id)
    return settled


def _apply_exit(runner: JobRunner, rec: Record, e: dict[str, Any]) -> None:
    """End ``rec`` by its observed exit, at the time the owner saw it (not now)."""
    runner.apply(rec, exit_event(e), {"proof": "exit observed by the owner"})


async def resolve(runner: JobRunner, job_id: int, started: bool, note: str, by: str
                  ) -> Record:
    """Record the operator's decision about a ``recovery_required`` record. Raises
    NotFound, Conflict (not recovery_required; or ``not started`` while the owner shows
    a sign of that launch)."""
    rec = runner.record(job_id)
    if rec.job.state is jm.State.RECOVERY_REQUIRED and not started:
        key = rec.job.launch_key
        assert key is not None
        ev = await Evidence.gather(runner)
        if key in ev.live or ev.seen.get(key):
            raise Conflict(f"job {job_id}: the owner shows launch {key} ({ev.of(key)}); "
                           "it started: resolve with --started", {"job": job_id,
                                                                  "evidence": ev.of(key)})
    runner.apply(rec, jm.Resolve(started, note, by))
    runner.wake()
    return rec
