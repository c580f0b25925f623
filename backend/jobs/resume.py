"""How a new backend generation takes over the open job records of the ledger.

A record in ``running`` was started (its pid came from the owner): it is live in the
owner's inventory, or its exit is in the owner's observations, or the owner's launch row
for its key, read with ``inspect``, says how it ended. No row (an owner.db set aside for a
new one, a row pruned) ends it ``lost``: asking with ``launch`` would start the key anew
when the owner no longer knows it.

A record in ``starting`` belongs to a generation that asked the owner to launch it and
stopped before it heard the answer (a handoff never leaves one: a start is a drain step).
This generation holds a newer epoch, so the old request can no longer land; but this
generation never sends a launch it did not decide itself. It looks for proof only: the
key live in the inventory, a ``launched``, ``exit`` or ``launch_failed`` observation for
it, or the owner's launch row of a process for it (``inspect``, which outlives the
ring). Without proof the record becomes ``recovery_required`` with the evidence, and
waits for ``tenure job resolve``.

A record in ``recovery_required`` stays so until the operator decides or the owner proves
how that start went: the same evidence (the key live, or a ``launched``, ``exit`` or
``launch_failed`` observation) settles it as it would settle a ``starting`` record
(``Proven``), when a generation starts and at every audit while such a record waits;
the owner's launch row of its key, read once per generation, settles it too (a start
whose events left the ring, a record made before its row was consulted).
No sign of the launch proves nothing and changes nothing. Proof only records what the
owner did: nothing is ever launched for it.

The same evidence, and the owner's launch row, guard ``resolve --not-started``: it is
refused while the owner shows any sign of that launch. ``resolve --started`` keeps what
the owner shows with the decision, and when that (or the owner's launch row) proves the
start, the record is settled from the proof instead, with its pid and exit.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from protocol.errors import Conflict, NotFound, TenureError

from . import machine as jm
from .ledger import Record
from .ownerrows import events_of_row, exit_event, owner_time, still_running
from .runner import JobRunner

__all__ = ["Evidence", "Proof", "audit", "resolve", "resume", "settle_proven", "start_proof"]

log = logging.getLogger("tenure.jobs")

RING_PAGE = 10_000
PROVEN_BATCH = 1_000     # recovery_required records checked against the owner per pass

Step = tuple[jm.Event, dict[str, Any] | None]   # an event and its history detail
EXIT_PROOF = {"proof": "exit observed by the owner"}
ROW_PROOF = {"proof": "the owner's launch row"}


class Proof(NamedTuple):
    """What the owner shows about one launch key that proves how its start went: ``steps``
    begin with the launch (Launched) or its refusal (LaunchRefused), then its end when
    shown; ``shows`` says which evidence it is, for people."""

    shows: str
    steps: list[Step]


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
    """Load every open record and settle the ones a previous generation left mid-way,
    then the ``recovery_required`` ones whose start the owner now proves
    (:func:`settle_proven`). Returns what was decided, by outcome (``proven``: settled
    from proof). Raises TenureError (nothing decided) when the owner cannot be read for
    a record left mid-way; when it cannot be read only for the proof, the waiting
    records are left to the next audit."""
    # a record admitted through the API since it opened is already tracked: keep that
    # object (two objects of one record would fight over its revision)
    recs = [runner.records.get(r.id) or r for r in runner.ledger.open_records()]
    for rec in recs:
        runner.track(rec)
    pending = [r for r in recs if r.job.state in (jm.State.STARTING, jm.State.RUNNING)]
    report: dict[str, list[int]] = {"running": [], "ended": [], "recovery_required": [],
                                    "proven": []}
    evidence = await Evidence.gather(runner) if pending else None
    for rec in pending:
        assert evidence is not None
        try:
            if rec.job.state is jm.State.STARTING:
                await _settle_start(runner, rec, evidence)
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
    try:
        report["proven"] = await settle_proven(runner, evidence)
    except TenureError as exc:   # a start proven later is settled by the audit
        log.warning("jobs: recovery_required records not checked against the owner: %s",
                    exc)
    return report


def start_proof(key: str, ev: Evidence) -> Proof | None:
    """What ``ev`` proves about the start of launch ``key``, or None when it shows no sign
    of it (which proves nothing). Asks the owner nothing."""
    seen = ev.seen.get(key, {})
    shown = {"proof": ev.of(key)}
    if "exit" in seen:
        launched = seen.get("launched")   # without it, when it started is unknown
        first = launched or seen["exit"]
        at = None if launched is None else owner_time(launched.get("at"))
        return Proof("its exit was observed", [
            (jm.Launched(int(first["pid"]), int(first.get("start_ticks", 0)), at), shown),
            (exit_event(seen["exit"]), EXIT_PROOF)])
    if key in ev.live:
        row = ev.live[key]
        return Proof("it is live in the owner's inventory", [
            (jm.Launched(int(row["pid"]), int(row["start_ticks"]),
                         owner_time(row.get("started_at"))), shown)])
    if "launch_failed" in seen:
        e = seen["launch_failed"]
        return Proof("its launch was refused", [
            (jm.LaunchRefused(str(e.get("code")), str(e.get("msg"))), shown)])
    if "launched" in seen:
        e = seen["launched"]
        return Proof("its launch was observed, and it is gone", [
            (jm.Launched(int(e["pid"]), int(e["start_ticks"]), owner_time(e.get("at"))),
             shown),
            (jm.Lost({"reason": "launched, then gone; its exit is not in the owner's "
                      "observations", **ev.of(key)}), None)])
    return None


async def _settle_start(runner: JobRunner, rec: Record, ev: Evidence) -> None:
    """Settle a ``starting`` record from what the owner shows of its launch: its
    inventory and observations, else its launch row (read only; it outlives the
    ring). Raises TenureError when the row cannot be read."""
    key = rec.job.launch_key
    assert key is not None
    proof = start_proof(key, ev)
    if proof is None:
        row = await _launch_row(runner, key)
        runner.rows_read.add(key)
        proof = None if row is None else _row_proof(row)
    if proof is None:
        runner.apply(rec, jm.Uncertain({
            "reason": "the generation that asked the owner to launch this job stopped "
                      "before it heard the answer, and the owner shows no sign of the "
                      "launch (not live, no launch or exit observed)",
            "launch_key": key, "attempt": rec.job.attempt, "epoch": runner.epoch,
            "checked_at": runner.clock.wall(), **ev.of(key)}))
        return
    for event, detail in proof.steps:
        runner.apply(rec, event, detail)


async def settle_proven(runner: JobRunner, evidence: Evidence | None = None) -> list[int]:
    """Settle each ``recovery_required`` record whose start the owner now proves (its key
    live, or a ``launched``, ``exit`` or ``launch_failed`` observation of it) from that
    proof, or its launch row (read once per generation and key), as a ``starting``
    record is settled; one it shows nothing of waits on. The owner is read (unless
    ``evidence`` is given) only when a record waits: its inventory and observation ring
    once per pass, for up to :data:`PROVEN_BATCH` records. Returns
    the ids settled. Raises TenureError when the owner cannot be read."""
    ids = [r.id for r in runner.ledger.records(
        states=(jm.State.RECOVERY_REQUIRED.value,), limit=PROVEN_BATCH)]
    if not ids:
        return []
    ev = evidence if evidence is not None else await Evidence.gather(runner)
    settled = []
    for job_id in ids:
        rec = _waiting(runner, job_id)   # again: a resolve may have moved it meanwhile
        key = None if rec is None else rec.job.launch_key
        proof = None if key is None else start_proof(key, ev) or \
            await _row_proof_once(runner, key)
        rec = _waiting(runner, job_id)
        if rec is None or key is None or proof is None or rec.job.launch_key != key:
            continue
        try:
            _settle_proven(runner, rec, proof, ev.of(key), f"the backend (epoch "
                           f"{runner.epoch})", "")
        except Conflict:
            continue  # another writer holds it
        settled.append(job_id)
    return settled


async def _row_proof_once(runner: JobRunner, key: str) -> Proof | None:
    """What the owner's launch row proves about ``key``, read once per generation (the
    ring shows whatever happens to a key later); None without a row of a process.
    Raises TenureError (the key is read again at the next pass)."""
    if key in runner.rows_read:
        return None
    row = await _launch_row(runner, key)
    runner.rows_read.add(key)
    return None if row is None else _row_proof(row)


def _waiting(runner: JobRunner, job_id: int) -> Record | None:
    """The record ``job_id`` as it is now, if it is still ``recovery_required``."""
    try:
        rec = runner.record(job_id)
    except NotFound:
        return None
    return rec if rec.job.state is jm.State.RECOVERY_REQUIRED else None


def _settle_proven(runner: JobRunner, rec: Record, proof: Proof, shown: dict[str, Any],
                   by: str, note: str) -> None:
    """Settle the ``recovery_required`` record ``rec`` from ``proof`` (``shown``, what the
    owner showed, goes into its resolution) and say so in the log. Raises Conflict
    (another writer moved it; nothing changed)."""
    key = rec.job.launch_key
    assert key is not None
    (start, detail), *rest = proof.steps
    assert isinstance(start, jm.Launched | jm.LaunchRefused)
    runner.apply(rec, jm.Proven(key, start, {"shows": proof.shows, **shown}, by, note),
                 detail)
    for event, more in rest:
        runner.apply(rec, event, more)
    log.warning("job %d: was recovery_required; settled from the owner's evidence (%s): "
                "%s%s", rec.id, proof.shows, rec.job.state,
                "" if rec.job.outcome is None else f", {rec.job.outcome}")


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
    # this key says how (read only: a launch of a key the owner no longer knows starts it)
    try:
        row = await _launch_row(runner, key)
        events = _row_events(row) if row is not None else [jm.Lost({
            "reason": "gone, and the owner has no row of its launch (a new owner.db, or "
                      "the row was pruned)", **ev.of(key)})]
    except TenureError as exc:
        events = [jm.Lost({"reason": f"gone, and the owner's row is unreadable: {exc}",
                           **ev.of(key)})]
    for e in events:
        runner.apply(rec, e, ROW_PROOF)


def _row_events(row: dict[str, Any]) -> list[jm.Event]:
    """The events the owner's launch row of a key that is not live proves: a row that
    still says running is one of an owner that is gone (Lost)."""
    events = events_of_row(row)
    if still_running(row):
        events.append(jm.Lost({"reason": "the owner's row says running, but the key is "
                               "not in its live inventory", "row": row}))
    return events


async def audit(runner: JobRunner, why: str = "was not observed here") -> list[int]:
    """Settle running records whose process the owner no longer runs but whose exit this
    generation did not see (an observation can be lost, e.g. one that arrived as a drain
    froze the reader and the drain was then aborted, or in an observation gap), then the
    ``recovery_required`` records whose start the owner now proves (:func:`settle_proven`).
    Returns the ids settled; the log says ``why`` an exit was missed. Raises TenureError
    when the owner cannot be read."""
    return await _audit_running(runner, why) + await settle_proven(runner)


async def _audit_running(runner: JobRunner, why: str) -> list[int]:
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
    """End ``rec`` by its observed exit, at the time the owner saw it (not now), and stop
    what outlived its leader (JobRunner.end_by_exit)."""
    runner.end_by_exit(rec, e, EXIT_PROOF)


async def resolve(runner: JobRunner, job_id: int, started: bool, note: str, by: str
                  ) -> Record:
    """Record the operator's decision about a ``recovery_required`` record, with what the
    owner shows at that moment (its history row). With ``started``, when the owner
    proves how the start went (its inventory, observations or launch row) the record is
    settled from that proof instead (``Proven``: the real pid, start and exit, and a
    resolution with ``proof``); an owner that cannot be read leaves the operator's word.
    Raises NotFound; Conflict (not recovery_required, and for one settled from the
    owner's evidence saying how it stands; ``not started`` while the owner shows a sign
    of that launch; another attempt became recovery_required while the owner was read);
    TenureError (``not started`` when the owner cannot be read)."""
    rec = runner.record(job_id)
    key = rec.job.launch_key
    if rec.job.state is not jm.State.RECOVERY_REQUIRED or key is None:
        runner.apply(rec, jm.Resolve(started, note, by))   # a retry, or its refusal
        runner.wake()
        return rec
    proof, shown = await (_shows_started(runner, key) if started
                          else _shows_not_started(runner, job_id, key))
    # again: while the owner was read, the audit may have settled it from the same proof
    rec = runner.record(job_id)
    if rec.job.state is jm.State.RECOVERY_REQUIRED and rec.job.launch_key != key:
        raise Conflict(f"job {job_id}: attempt {rec.job.attempt} became recovery_required "
                       f"while the owner was read about {key}; look again (`tenure job "
                       f"show {job_id}`)", {"job": job_id, "state": rec.job.state.value})
    if proof is not None and rec.job.state is jm.State.RECOVERY_REQUIRED:
        _settle_proven(runner, rec, proof, shown, by, note)
    else:
        runner.apply(rec, jm.Resolve(started, note, by), {"owner": shown})
    runner.wake()
    return rec


async def _shows_started(runner: JobRunner, key: str
                         ) -> tuple[Proof | None, dict[str, Any]]:
    """What the owner shows about ``key`` for ``resolve --started``: the proof it gives
    (inventory or observations, else its launch row, which outlives the ring) and the
    evidence; no proof and why when it cannot be read (the operator's word stands)."""
    try:
        ev = await Evidence.gather(runner)
        shown = ev.of(key)
        proof = start_proof(key, ev)
        if proof is None:
            row = await _launch_row(runner, key)
            shown["row"] = row
            proof = None if row is None else _row_proof(row)
    except TenureError as exc:
        log.warning("job resolve --started: the owner cannot be read (%s); the "
                    "operator's word stands", exc)
        return None, {"unreadable": exc.to_wire()}
    return proof, shown


def _row_proof(row: dict[str, Any]) -> Proof | None:
    """What the owner's launch row of a key that is not live proves about its start;
    None for a row without a process (it proves no start)."""
    events = _row_events(row)
    if not isinstance(events[0], jm.Launched | jm.LaunchRefused):
        return None
    return Proof("the owner's launch row", [(e, ROW_PROOF) for e in events])


async def _launch_row(runner: JobRunner, key: str) -> dict[str, Any] | None:
    """The owner's row of launch ``key`` if it had a process (``inspect``: read-only,
    unlike ``launch``, which would start a key it never saw), else None. Raises
    TenureError."""
    try:
        return dict(await runner.owner.call("inspect", {"launch_key": key}))
    except NotFound:
        return None


async def _shows_not_started(runner: JobRunner, job_id: int, key: str
                             ) -> tuple[None, dict[str, Any]]:
    """What the owner shows about ``key`` for ``resolve --not-started``. Raises Conflict
    while it shows any sign of that launch, TenureError when it cannot be read."""
    ev = await Evidence.gather(runner)
    shown = ev.of(key)
    if not (key in ev.live or ev.seen.get(key)):
        row = await _launch_row(runner, key)   # it outlives the ring
        if row is None:
            return None, shown
        shown["row"] = row
    raise Conflict(f"job {job_id}: the owner shows launch {key} ({shown}); it started: "
                   "resolve with --started", {"job": job_id, "evidence": shown})
