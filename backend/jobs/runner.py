"""The job runner: admits, starts, observes and stops job records through the owner.

Every change of a record goes through :meth:`JobRunner.apply`: the machine decides, the
ledger commits (compare-and-set), and only then are the machine's actions executed. So
``starting`` with its launch key is durable before the owner hears of the launch, and
``running`` only after the owner answered.

A start is one step of the drain barrier (backend.steps): a drain lets it finish, and no
start begins while the gate is paused, so a handoff never leaves a start half-way. Within
one generation an unanswered launch is retried with the same key (the owner never starts
a second process for a key); a generation that did not send a launch itself never sends
one for a record in ``starting`` (backend.jobs.resume decides those from evidence).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from protocol.errors import (
    BadRequest,
    Conflict,
    LaunchFailed,
    NotFound,
    ShuttingDown,
    StackFenced,
    StaleEpoch,
    StopTimeout,
    StorageFailed,
    TenureError,
)

from .. import instance as im
from ..enforce import user_env
from ..left_behind import announce, stop_left_behind
from ..model import Config
from ..owner_mutations import OWNER_AWAY_POLL_S, OwnerCalls
from ..steps import StepGate
from ..supervisor import Supervisor
from ..tasks import spawn
from ..waiters import Waiters
from . import machine as jm
from .faults import JobFault
from .ledger import Admission, Ledger, Record, make_spec
from .ownerrows import events_of_row, exit_event

STEP_PREFIX = "job "   # the drain barrier names job steps "job <id> start|stop"

__all__ = ["LAUNCH_TRIES", "STEP_PREFIX", "Clock", "JobRunner", "SystemClock", "journal_app"]

log = logging.getLogger("tenure.jobs")

LAUNCH_TRIES = 5
TICK = 1.0                  # the runner looks at deadlines and schedules at least this often
CLOSE_GRACE = 5.0
AUDIT_EVERY = 10.0          # running and recovery_required records are checked against
                            # the owner this often (backend.jobs.resume.audit)


class Clock(Protocol):
    def wall(self) -> float: ...
    def mono(self) -> float: ...


class SystemClock:
    def wall(self) -> float:
        return time.time()

    def mono(self) -> float:
        return time.monotonic()  # CLOCK_MONOTONIC: one clock for all processes of a boot


def journal_app(template: str) -> str:
    """The journal's ``app`` for a template's runs (':' is never in an app name)."""
    return f"job:{template}"


class JobRunner:
    """The open records of the ledger and the tasks that move them. Construct inside the
    running loop; ``resume`` (backend.jobs.resume) then ``start``."""

    def __init__(self, ledger: Ledger, owner: OwnerCalls, epoch: int, sup: Supervisor,
                 gate: StepGate, *, config: Callable[[], Config],
                 stopped_stacks: Callable[[], set[str]], clock: Clock | None = None,
                 sleep: Callable[[float], Any] = asyncio.sleep,
                 fault: JobFault | None = None) -> None:
        """Job launches and stops leave the recovery certificate alone: it vouches for
        the applications only (protocol.digest), the ledger accounts for jobs."""
        self.ledger = ledger
        self.owner = owner
        self.epoch = epoch
        self.sup = sup
        self.gate = gate
        self.config = config
        self.stopped_stacks = stopped_stacks
        self.clock = clock or SystemClock()
        self.sleep = sleep
        self.fault = fault or JobFault()
        self.records: dict[int, Record] = {}      # open records: admitted/starting/running
        self.by_launch: dict[str, int] = {}
        self.on_tick: list[Callable[[float], None]] = []  # schedules, retention
        self._hook_errors: dict[str, str] = {}    # the last error logged, per hook
        self.rows_read: set[str] = set()  # recovery_required keys whose row was read
        self._starting: set[int] = set()          # start tasks spawned, not yet ended
        self._stopping: set[int] = set()          # stop tasks spawned, not yet ended
        # launch answers the ledger could not record yet (a full disk): each tick again
        self._answers: dict[int, tuple[Record, list[jm.Event]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._waiters = Waiters()

    @property
    def fenced(self) -> bool:
        """A newer generation holds the owner (Supervisor.fence): never act again."""
        return self.sup.fenced

    # -- records ----------------------------------------------------------------------

    def record(self, job_id: int) -> Record:
        """The live record (open ones from memory). Raises NotFound."""
        return self.records.get(job_id) or self.ledger.get(job_id)

    def track(self, rec: Record) -> None:
        """Keep ``rec`` in memory while it is open; forget it once it is not."""
        # by_launch holds open records' current launches only: the events of any other
        # are ignored (on_observation), and an entry kept per run grew without end.
        for key in [k for k, v in self.by_launch.items() if v == rec.id]:
            del self.by_launch[key]
        if rec.job.state in jm.OPEN:
            self.records[rec.id] = rec
            if rec.job.launch_key is not None:
                self.by_launch[rec.job.launch_key] = rec.id
        else:
            self.records.pop(rec.id, None)
        self._notify()

    def apply(self, rec: Record, event: jm.Event, detail: dict[str, Any] | None = None
              ) -> list[jm.Action]:
        """Feed ``event``: the machine decides (Conflict: a refused request, nothing
        changed), the ledger commits, then the caller executes the returned actions.
        Raises Conflict also when another writer moved the record (it is dropped here)."""
        job = jm.Job.from_wire(rec.job.to_wire())
        before = job.state
        actions = job.handle(event, self.clock.wall(), self.clock.mono())
        if job.to_wire() != rec.job.to_wire():
            try:
                self.ledger.save(rec, job, event, before, self.clock.wall(), detail)
            except Conflict:
                self.records.pop(rec.id, None)
                log.error("job %d was changed by another writer; leaving it alone", rec.id)
                raise
            if job.state is not before:
                log.info("job %d (%s): %s -> %s", rec.id, rec.template_key, before,
                         job.state)
        self.track(rec)
        return actions

    def submit(self, template_key: str, key: str | None, args: list[str]
               ) -> tuple[Record, bool]:
        """Admit a record for ``stack/name`` (committed before this returns). Raises
        NotFound (no such template in the applied config), Conflict (the key holds
        another submission), JobQueueFull (``max_pending`` records are open).
        A key whose record came from the same template and arguments answers that record
        whatever the config says of the template now: the retry of a lost answer after
        an apply changed or removed it is the same request (the record keeps what it was
        admitted with)."""
        stack, _, name = template_key.partition("/")
        prior = None if key is None else self.ledger.by_key(key)
        if prior is not None and (prior.stack, prior.template, prior.spec.get("args")) \
                == (stack, name, args):
            return prior, True
        template = self.config().job(stack, name)
        if template is None:
            raise NotFound(f"no job template {template_key!r} in the applied config",
                           {"template": template_key})
        rec, dup = self.ledger.admit(Admission(stack, name, make_spec(template, args),
                                               key=key, max_open=template.max_pending),
                                     self.clock.wall())
        if not dup:
            self.track(rec)
            self.fault.at("admitted", rec.id, 0)
            self.wake()
        return rec, dup

    # -- the loop ---------------------------------------------------------------------

    def start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.create_task(self._run())

    def wake(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        from .resume import audit
        last_audit = self.clock.mono()
        while not self.fenced:
            if self.gate.paused:
                await self.gate.wait_open()  # a drain holds new starts and stops here
                last_audit = 0.0             # and may have cost an exit observation
            try:
                self.tick()
                if self.clock.mono() - last_audit >= AUDIT_EVERY:
                    last_audit = self.clock.mono()
                    await audit(self)
            except TenureError as exc:
                log.warning("job runner: %s", exc)
            except (sqlite3.Error, OSError) as exc:   # a full disk: each tick tries again
                said = f"{type(exc).__name__}: {exc}"
                if self._hook_errors.get("tick") != said:
                    self._hook_errors["tick"] = said
                    log.error("job runner: the ledger cannot be written (%s); tried "
                              "again each tick", said)
            except Exception:  # one bad record must not stop every job
                log.exception("job runner tick failed")
            else:
                self._hook_errors.pop("tick", None)
            self._wake.clear()
            try:
                async with asyncio.timeout(TICK):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def tick(self) -> None:
        """One pass: stop what ran out of time, admit what a schedule made due, start
        what may start. Does nothing while draining or fenced."""
        if self.fenced or self.gate.paused or self.sup.frozen:
            return
        for rec, events in list(self._answers.values()):
            self._record_answer(rec, events)
        mono = self.clock.mono()
        for rec in list(self.records.values()):
            try:
                self._check_running(rec, mono)
            except Conflict:
                pass  # another writer holds it (logged in apply)
        for hook in self.on_tick:
            self._run_hook(hook)
        active = self._active()
        for rec in sorted(self.records.values(), key=lambda r: r.id):
            if rec.job.state is jm.State.ADMITTED and rec.id not in self._starting \
                    and self.waiting_for(rec, active) is None:
                active[(rec.stack, rec.template)] += 1
                self._starting.add(rec.id)
                self._spawn(self._start(rec))

    def _run_hook(self, hook: Callable[[float], None]) -> None:
        """Run one tick hook (a schedule, retention). Its error is logged, once until it
        changes or the hook succeeds again, and never stops the tick: a hook that kept
        failing would otherwise keep every admitted record from starting."""
        name = getattr(hook, "__qualname__", repr(hook))
        try:
            hook(self.clock.wall())
        except Exception as exc:  # logged: the start loop must run
            said = f"{type(exc).__name__}: {exc}"
            if self._hook_errors.get(name) != said:
                self._hook_errors[name] = said
                if isinstance(exc, TenureError):
                    log.error("job runner: %s failed: %s", name, exc)
                else:
                    log.exception("job runner: %s failed", name)
        else:
            self._hook_errors.pop(name, None)

    def _check_running(self, rec: Record, mono: float) -> None:
        """Stop a running record that ran out of time, or whose recorded stop was not
        sent or not confirmed (a drain began, a generation died): stop is idempotent."""
        job = rec.job
        if job.state is not jm.State.RUNNING:
            return
        if job.deadline is not None and job.deadline <= mono and job.stop_reason is None:
            self._execute(rec, self.apply(rec, jm.TimedOut()))
        elif job.stop_reason is not None and rec.id not in self._stopping:
            assert job.launch_key is not None
            self._execute(rec, [jm.Stop(job.launch_key)])

    def _active(self) -> Counter[tuple[str, str]]:
        """Records starting or running (or about to start), per (stack, template)."""
        return Counter((r.stack, r.template) for r in self.records.values()
                       if r.job.state in (jm.State.STARTING, jm.State.RUNNING)
                       or r.id in self._starting)

    def waiting_for(self, rec: Record, active: Counter[tuple[str, str]] | None = None
                    ) -> str | None:
        """Why an admitted record does not start now, or None."""
        stack, name = rec.stack, rec.template
        if stack in self.stopped_stacks():
            return f"stack {stack} is stopped"
        if not self.sup.owner_answers():   # its start waits for the owner: say that first
            return "the owner does not answer (`tenure status` says why)"
        template = self.config().job(stack, name)
        limit = template.max_concurrent if template is not None else 1
        count = (active if active is not None else self._active())[(stack, name)]
        if rec.id not in self._starting and count >= limit:
            return f"max_concurrent {limit} reached"
        config = self.config()
        gone = [a for a in rec.spec["after"] if config.app(stack, a) is None]
        if gone:   # it waits for good: say so, with the way out
            return (f"apps not in the config: {', '.join(gone)} (waits until they are "
                    f"added back; `tenure job withdraw {rec.id}` ends it)")
        unready = [a for a in rec.spec["after"] if not self._app_ready(stack, a)]
        if unready:
            return f"apps not ready: {', '.join(unready)}"
        return None

    def _app_ready(self, stack: str, name: str) -> bool:
        app = self.config().app(stack, name)
        if app is None:
            return False
        insts = [self.sup.instances.get(f"{stack}/{name}/{i}") for i in range(app.instances)]
        return all(i is not None and i.state is im.State.READY for i in insts)

    # -- starting ---------------------------------------------------------------------

    async def _start(self, rec: Record) -> None:
        try:
            with self.gate.step(f"{STEP_PREFIX}{rec.id} start"):
                actions = self.apply(rec, jm.Start(self.ledger.launch_prefix))
                if not actions:
                    return  # withdrawn (or moved on) since the tick chose it
                self.fault.at("starting", rec.id, rec.job.attempt)
                events = await self._launch(rec)
                self.fault.at("launched", rec.id, rec.job.attempt)
                self._record_answer(rec, events)
        except ShuttingDown:
            pass  # a drain began first: nothing was started, the record stays admitted
        except Conflict:
            pass  # another writer holds it (logged in apply)
        finally:
            self._starting.discard(rec.id)
            self.wake()

    def _record_answer(self, rec: Record, events: list[jm.Event]) -> None:
        """Apply the events of the owner's answer to ``rec``'s launch. Those the ledger
        cannot record (a full or failing disk) are kept and applied again at every
        tick until it can: the process runs, and left ``starting`` the record was never
        timed out, could not be stopped (its start "in progress") and held a
        ``max_concurrent`` slot for good. Another writer holding the record (Conflict,
        logged in apply) drops them: that writer settles it."""
        if rec.id in self._answers and rec.job.state is not jm.State.STARTING:
            del self._answers[rec.id]   # its exit (or a resolve) was recorded meanwhile
            log.info("job %d: the owner's answer to its launch was not recorded: the "
                     "record moved on meanwhile (it is %s)", rec.id, rec.job.state)
            return
        for i, ev in enumerate(events):
            try:
                self.apply(rec, ev)
            except Conflict:
                self._answers.pop(rec.id, None)
                return
            except (sqlite3.Error, OSError) as exc:
                if rec.id not in self._answers:
                    log.error("job %d: the owner's answer to its launch (%s) could not be "
                              "recorded (%s: %s); it stays %s until it is, tried again "
                              "each tick", rec.id, type(ev).__name__, type(exc).__name__,
                              exc, rec.job.state)
                self._answers[rec.id] = (rec, [_dated(e, self.clock.wall())
                                               for e in events[i:]])
                return
        if self._answers.pop(rec.id, None) is not None:
            log.info("job %d: the owner's answer to its launch is recorded", rec.id)

    def launch_params(self, rec: Record) -> dict[str, Any]:
        """The owner's launch parameters: what the record pinned at admission, run as
        its identity (with that user's HOME, USER and LOGNAME, as an app)."""
        job = rec.job
        identity = rec.spec.get("identity") or {}
        env = {**user_env(self.sup.base_env, identity.get("user"), rec.spec["env"]),
               "TENURE_STACK": rec.stack, "TENURE_JOB": rec.template,
               "TENURE_JOB_ID": str(rec.id), "TENURE_JOB_ATTEMPT": str(job.attempt)}
        if rec.key is not None:
            env["TENURE_JOB_KEY"] = rec.key
        return {"launch_key": job.launch_key, "stack": rec.stack,
                "app": journal_app(rec.template), "instance": rec.id,
                "generation": job.attempt, "argv": rec.spec["argv"], "env": env,
                "cwd": rec.spec["cwd"], "stop": rec.spec["stop"],
                **({"identity": identity} if identity else {})}

    async def _launch(self, rec: Record) -> list[jm.Event]:
        """Ask the owner to launch ``rec``'s key, again with the same key while the answer
        is unknown, and for as long as no owner can take it (Supervisor.owner_away). The
        events that describe the answer; none when fenced (the record stays ``starting``
        for the next generation to decide)."""
        params = self.launch_params(rec)
        last: TenureError | None = None
        tries = 0
        while tries < LAUNCH_TRIES:
            try:
                row = await self.owner.call("launch", params, epoch=self.epoch)
                return events_of_row(row)
            except StaleEpoch as exc:
                self.sup.fence(f"the owner refused a job's launch: {exc.msg}")
                log.warning("fenced: job %d stays starting for the next generation", rec.id)
                return []
            except (LaunchFailed, StackFenced, BadRequest, StorageFailed) as exc:
                # STORAGE_FAILED: the owner could not write the starting row, so it
                # started nothing (the running row's failure answers ``uncertain``)
                return [jm.LaunchRefused(exc.code_str, exc.msg)]
            except TenureError as exc:  # not sent, or sent with the outcome unknown
                last = exc
                if self.sup.owner_away(exc):   # no owner to take it: no attempt spent
                    if self.sup.fenced:
                        return []   # the record stays starting for the next generation
                    await self.sleep(OWNER_AWAY_POLL_S)
                    continue
                tries += 1
                log.warning("job %d: launch not answered (%s); asking again", rec.id, exc)
                await self.sleep(0.5)
        return [jm.Uncertain({
            "reason": f"the owner did not answer {LAUNCH_TRIES} launch requests",
            "launch_key": params["launch_key"], "attempt": rec.job.attempt,
            "last_error": last.to_wire() if last is not None else None,
            "epoch": self.epoch, "at": self.clock.wall()})]

    # -- stopping ---------------------------------------------------------------------

    def stop(self, job_id: int) -> Record:
        """Ask for a running record to be stopped (its exit ends it). Raises NotFound,
        Conflict (not running)."""
        rec = self.record(job_id)
        self._execute(rec, self.apply(rec, jm.StopRequested()))
        return rec

    def _execute(self, rec: Record, actions: list[jm.Action]) -> None:
        for action in actions:
            if isinstance(action, jm.Stop) and rec.id not in self._stopping:
                self._stopping.add(rec.id)
                self._spawn(self._stop(rec, action.launch_key))

    async def _stop(self, rec: Record, launch_key: str) -> None:
        try:
            await self._stop_once(rec, launch_key)
        finally:
            self._stopping.discard(rec.id)

    async def _stop_once(self, rec: Record, launch_key: str) -> None:
        try:
            with self.gate.step(f"{STEP_PREFIX}{rec.id} stop"):
                while not self.fenced:
                    try:
                        await self.owner.call("stop", {"launch_key": launch_key},
                                              epoch=self.epoch, timeout=3600)
                        return
                    except NotFound:
                        return  # already gone: its exit is (or was) observed
                    except StaleEpoch as exc:
                        self.sup.fence(f"the owner refused a job's stop: {exc.msg}")
                    except StopTimeout as exc:
                        log.error("job %d: still alive after its stop policy: %s", rec.id,
                                  exc)
                        return
                    except TenureError as exc:
                        log.warning("job %d: stop not confirmed (%s); again", rec.id, exc)
                        await self.sleep(1.0)
        except ShuttingDown:
            log.warning("job %d: stop not sent, a drain began; it is recorded and sent "
                        "after the drain (here or in the next generation)", rec.id)

    # -- observations -----------------------------------------------------------------

    def on_observation(self, e: dict[str, Any]) -> None:
        """An owner event: the exit of a job's launch ends its record."""
        job_id = self.by_launch.get(e.get("launch_key", ""))
        rec = self.records.get(job_id) if job_id is not None else None
        if rec is None or rec.job.launch_key != e.get("launch_key") or e["kind"] != "exit":
            return
        self.fault.at("exited", rec.id, rec.job.attempt)
        try:
            self.end_by_exit(rec, e)
        except Conflict:
            pass
        except (sqlite3.Error, OSError) as exc:
            # A full or failing disk. Raised into the observation reader, it ended the
            # generation; the record stays running here, and the audit (every
            # AUDIT_EVERY) settles it from the owner's row of its launch once the
            # ledger takes writes again.
            log.error("job %d: its exit could not be recorded (%s); it is settled from "
                      "the owner's record of its launch once the disk takes writes "
                      "(looked at every %.0f s)", rec.id, exc, AUDIT_EVERY)
        self.wake()

    def end_by_exit(self, rec: Record, e: dict[str, Any],
                    detail: dict[str, Any] | None = None) -> None:
        """End ``rec`` by the owner's ``exit`` event ``e`` (at the time the owner saw it)
        and stop what outlived its leader (``e["descendants"]``), as for an app: the
        record keeps the outcome its leader gave it; its history row of the exit says
        how many outlived it. Raises Conflict (another writer holds it: nothing done)."""
        count = e.get("descendants")
        count = count if isinstance(count, int) and not isinstance(count, bool) and \
            count > 0 else 0
        self.apply(rec, exit_event(e), {**(detail or {}), "descendants": count}
                   if count else detail)
        if count and not self.fenced:
            announce(log, f"job {rec.id}", count, e["launch_key"])
            self._spawn(self._stop_left_behind(rec, e["launch_key"]))

    async def _stop_left_behind(self, rec: Record, launch_key: str) -> None:
        """One stop of what outlived ``launch_key``'s leader (backend.left_behind). A
        drain waits for it, as it waits for an app's; it begins even while the gate is
        paused, since nothing would send it later (the record has ended)."""
        try:
            with self.gate.step(f"{STEP_PREFIX}{rec.id} stop left behind", continues=True):
                await stop_left_behind(self.owner, self.epoch, launch_key, f"job {rec.id}",
                                       log)
        except StaleEpoch as exc:
            self.sup.fence(f"the owner refused the stop of what outlived a job: {exc.msg}")

    # -- reporting --------------------------------------------------------------------

    def busy(self) -> bool:
        """A start or stop is in flight."""
        return bool(self._tasks)

    def steps(self) -> set[str]:
        """The drain-barrier steps that are job starts and stops."""
        return {s for s in self.gate.running() if s.startswith(STEP_PREFIX)}

    def summary(self) -> dict[str, int]:
        """How many records are open, by state, and how many wait for the operator."""
        out = dict.fromkeys((s.value for s in jm.OPEN), 0)
        for rec in self.records.values():
            out[rec.job.state.value] += 1
        out["recovery_required"] = self.ledger.count(jm.State.RECOVERY_REQUIRED)
        return out

    def inventory(self) -> list[dict[str, Any]]:
        """Running jobs as inventory rows (what the owner's live inventory also lists)."""
        return [{"stack": r.stack, "app": journal_app(r.template), "instance": r.id,
                 "generation": r.job.attempt, "launch_key": r.job.launch_key,
                 "pid": r.job.pid, "start_ticks": r.job.start_ticks, "restarts": 0,
                 "state": r.job.state.value}
                for r in self.records.values()
                if r.job.state is jm.State.RUNNING and r.job.pid is not None]

    async def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate()`` holds (re-checked after every record change)."""
        return await self._waiters.until(predicate, timeout)

    def _notify(self) -> None:
        self._waiters.wake()

    def spawn(self, coro: Any) -> None:
        """Run ``coro`` as one of the runner's tasks (``aclose`` waits for it, then
        cancels it)."""
        self._spawn(coro)

    def _spawn(self, coro: Any) -> None:
        spawn(self._tasks, coro, log, "job")

    async def aclose(self, grace: float = CLOSE_GRACE) -> None:
        """Stop deciding; give starts and stops in flight ``grace`` seconds to hear the
        owner's answer (one cut short leaves its record for the next generation to
        settle from evidence), then cancel them."""
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()


def _dated(ev: jm.Event, wall: float) -> jm.Event:
    """``ev``, a launch that does not say when it happened dated ``wall`` (when its answer
    came): recorded later, it must not count its timeout from then."""
    if isinstance(ev, jm.Launched) and ev.at is None:
        return jm.Launched(ev.pid, ev.start_ticks, wall)
    return ev
