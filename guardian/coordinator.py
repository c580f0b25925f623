"""The guardian's coordinator: which backend generation holds control, and the moves every
activation makes — fence, launch, verify, stop, end.

Every move is an activation row whose phase advances by compare-and-set along its kind's
table (guardian.phases); every grant is written to state.db before the owner is fenced
with it, and a backend starts only after the owner accepted its grant. The flows that
use these moves live in guardian.handoff (hot) and guardian.cold (first start, crash
recovery, a replaced owner). Nothing here decides about applications: the backends do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from protocol.aclient import AsyncClient
from protocol.ed25519 import PrivateKey
from protocol.errors import (
    BackendUnavailable,
    Conflict,
    GuardianFault,
    HandoffFailed,
    HomeLost,
    NotFound,
    OperationInProgress,
    TenureError,
    Uncertain,
)
from protocol.handover import pack_handoff, read_checkpoint, write_handoff
from protocol.homewatch import HomeMark, end_if_lost
from protocol.identity import Identity, new_identity
from protocol.link import Link
from protocol.procfs import read_stat, silence
from protocol.sockets import peer_credentials

from .backendproc import BackendProcess, ControlLink, control, preflight
from .cold import RECOVERY_BACKOFF, STABLE_S
from .diagnostics import Diagnostics, snapshot
from .faults import Fault
from .interp import load_bindings
from .own import Running
from .ownerside import OwnerSide
from .paths import GuardianPaths
from .phases import Phase, outcome_of
from .release import Release
from .retention import activations_to_keep, prune_artifacts
from .schemas import LEGACY, declared
from .standby import Standbys
from .state import Activation, StateStore
from .trust import verified_release

__all__ = ["Coordinator"]

log = logging.getLogger("tenure.guardian")

KEEP_ARTIFACTS = 40  # handoff records, checkpoints and backend logs kept for diagnosis
DEADLINE = 30.0      # a generation's READY, drain, preflight and control answers
LIVE_CHECK_S = 5.0   # the answer of a generation found on api.sock (live_backend)


def _deadline() -> float:
    """TENURE_GUARDIAN_DEADLINE (test-only) shortens every deadline, so a fault matrix
    with hangs finishes in minutes; the default is 30 s."""
    try:
        return max(1.0, float(os.environ.get("TENURE_GUARDIAN_DEADLINE") or DEADLINE))
    except ValueError:
        return DEADLINE


def _recovery_scale() -> float:
    """TENURE_GUARDIAN_RECOVERY_SCALE (test-only) multiplies the crash recovery's waits
    and its stable period (guardian.cold), so a test of a crash loop ends in seconds; the
    default, and any value that is not a positive number, is 1."""
    try:
        scale = float(os.environ.get("TENURE_GUARDIAN_RECOVERY_SCALE") or 1.0)
    except ValueError:
        return 1.0
    return scale if 0.0 < scale < float("inf") else 1.0


class Coordinator(OwnerSide, Standbys):
    """The moves of every activation. The owner link's methods (guardian.ownerside) and
    the standby generations' (guardian.standby) are parts it inherits."""

    def __init__(self, paths: GuardianPaths, state: StateStore, key: PrivateKey
                 ) -> None:
        self.paths = paths
        self.state = state
        self.key = key
        self.identity = new_identity()
        self.owner: AsyncClient | None = None
        self.owner_identity: Identity | None = None
        self.owner_link = Link(since=time.time(), seen=0.0)
        self.current: BackendProcess | None = None
        self.incumbent: BackendProcess | None = None   # during a handoff (fault targets)
        self.candidate: BackendProcess | None = None
        self.command_lock = asyncio.Lock()
        self.commanding: str | None = None   # the guardian command under way (take)
        self.blocked: dict[str, Any] | None = None
        self._ending_later: set[str] = set()   # activations whose ending waits for room
        self.unhealthy: dict[str, Any] | None = None
        self.diagnostics = Diagnostics(paths.diagnostics, lambda: snapshot(self))
        self.abort_requested = False
        self.fault = Fault()
        self.deadline = _deadline()
        # failed recovery attempts in a row (starts that failed, generations that crashed
        # within stable_s of starting), and how many of them were crashes; a generation
        # that stayed up stable_s ends the streak (guardian.cold). Memory only, as the
        # blocked state: a guardian restart checks and starts afresh
        self.recovery_attempts = 0
        self.recovery_crashes = 0
        # the release whose failures the streak counts: another one selected since (the
        # documented way out of a crash loop, `tenure release select`) starts afresh
        self.recovery_release: str | None = None
        scale = _recovery_scale()
        self.backoff = tuple(d * scale for d in RECOVERY_BACKOFF)
        self.stable_s = STABLE_S * scale
        self.clock = time.monotonic   # seam: a generation's uptime (fakes move it)
        # while a failed recovery waits for its next attempt: which one failed, how, when
        # the next is due (guardian.cold); None otherwise
        self.recovery_failing: dict[str, Any] | None = None
        self.own: Running | None = None      # this guardian's own release (guardian.own)
        self.reexec: str | None = None       # set by an upgrade of the guardian itself
        self.declared: dict[str, dict[str, Any]] = {}  # release id -> its schemas
        # release root -> identity of its files when this guardian last hashed them all
        # (guardian.release.verify); memory only: a restarted guardian hashes again
        self.hashed: dict[str, bytes] = {}
        self.sleep = asyncio.sleep  # seams: fakes never sleep
        # the home this guardian started in, and how it ends when that is lost
        # (guardian.daemon sets both)
        self.home_mark: HomeMark | None = None
        self.end_home_lost: Callable[[HomeLost], None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._spare: tuple[str, asyncio.Task[BackendProcess | None]] | None = None
        self._link: ControlLink | None = None   # to the generation in control, while held

    # -- the generation in control -----------------------------------------------

    async def control(self, method: str, params: dict[str, Any] | None = None,
                      timeout: float | None = None) -> Any:
        """One call to the generation answering on api.sock: the one in control, when
        there is one (IdentityMismatch when another process answers). Inside
        :meth:`holding_link`, on its connection while that generation is in control."""
        wait = self.deadline if timeout is None else timeout
        pid = None if self.current is None else self.current.pid
        link = self._link
        if link is None or pid is None or link.pid != pid:
            answer = await control(self.paths.api_sock, method, params, timeout=wait, pid=pid)
        else:
            try:
                answer = await link.call(method, params, timeout=wait)
            except TenureError:   # the calls after it connect each on their own
                await self.drop_link()
                raise
        self.fault.after_reply(method)
        return answer

    @contextlib.asynccontextmanager
    async def holding_link(self) -> AsyncIterator[None]:
        """:meth:`control` calls to the generation in control share one connection
        until the block ends (a handoff's admission, drain, checkpoint and retire)."""
        pid = None if self.current is None else self.current.pid
        self._link = ControlLink(self.paths.api_sock, pid) if pid is not None else None
        try:
            yield
        finally:
            await self.drop_link()

    async def drop_link(self) -> None:
        """Close the link :meth:`holding_link` holds, if any, before its block ends."""
        link, self._link = self._link, None
        if link is not None:
            await link.close()

    # -- phases -----------------------------------------------------------------------

    def advance(self, act: Activation, new: Phase, detail: dict[str, Any] | None = None,
                **fields: Any) -> Activation:
        act = self.state.advance(act.id, act.phase, new, detail, **fields)
        self.diagnostics_soon()
        self.fault.check(new)
        return act

    def end(self, act: Activation, phase: Phase, exc: TenureError) -> Activation:
        """Record the ending ``phase`` with the error's code and message. An activation
        that is already final is returned unchanged. ``uncertain`` also blocks automatic
        recovery until the operator acts. Never raises: an ending the storage refuses (a
        full disk) is recorded later, tried again until it is (:meth:`_end_later`);
        raised, it left the activation unfinished for good, and every later upgrade
        refused, until the guardian was restarted."""
        try:
            act = self._record_end(act, phase, exc)
        except TenureError as err:
            log.error("could not record ending %s of %s: %s", phase, act.id, err)
            with contextlib.suppress(TenureError, sqlite3.Error, OSError):
                act = self.state.activation(act.id)
        except (sqlite3.Error, OSError) as err:
            log.error("could not record ending %s of %s (%s); tried again until it is",
                      phase, act.id, err)
            if act.id not in self._ending_later:   # one at a time: the first ending wins
                self._ending_later.add(act.id)
                self.spawn(self._end_later(act.id, phase, exc), f"ending of {act.id}")
        if phase is Phase.UNCERTAIN:
            self.blocked = {"code": exc.code_str, "reason": exc.msg, "at": time.time(),
                            "activation": act.id}
        self.write_diagnostics()
        return act

    def _record_end(self, act: Activation, phase: Phase, exc: TenureError) -> Activation:
        return self.state.advance(act.id, act.phase, phase, {"error": str(exc), **exc.data},
                                  outcome=str(outcome_of(phase)), code=exc.code_str,
                                  error=exc.msg)

    async def _end_later(self, aid: str, phase: Phase, exc: TenureError,
                         first: float = 1.0) -> None:
        """Record ending ``phase`` of activation ``aid`` once the storage takes it:
        tried after ``first`` s, then twice as long each time up to 30 s; done once the
        activation is final (by this or by anything else)."""
        delay = first
        try:
            while True:
                await self.sleep(delay)
                try:
                    act = self.state.activation(aid)
                    if act.final:
                        return
                    self._record_end(act, phase, exc)
                except (Conflict, NotFound) as gone:   # moved or gone meanwhile: not ours
                    log.warning("ending %s of %s not recorded: %s", phase, aid, gone)
                    return
                except (TenureError, sqlite3.Error, OSError):
                    delay = min(delay * 2, 30.0)
                    continue
                log.warning("recorded ending %s of %s (the storage takes writes again)",
                            phase, aid)
                self.write_diagnostics()
                return
        finally:
            self._ending_later.discard(aid)

    def point(self, name: str) -> None:
        """An await point of a flow: where the test-only fault harness injects."""
        if self.fault.spec is not None:
            self.fault.at(name, self._fault_pid)

    def _fault_pid(self, role: str) -> int | None:
        if role == "owner":
            return self.owner_identity.pid if self.owner_identity else None
        if role == "incumbent":
            return self.incumbent.pid if self.incumbent else None
        if self.candidate is not None:
            return self.candidate.pid
        cur = self.current
        return cur.pid if cur is not None and cur is not self.incumbent else None

    def release(self, release_id: str) -> Release:
        """Verify before every execution (:func:`verified_release`); a release whose
        files are the very files this guardian hashed before is not hashed again. Raises
        what verification raises, with ``data.release`` naming the release (what a
        blocked recovery then tells the operator to fix: guardian.cold.next_step)."""
        try:
            return verified_release(self.paths, release_id, self.hashed)
        except TenureError as exc:
            exc.data = {**exc.data, "release": release_id}
            raise

    def bindings(self) -> list[Any]:
        """Interpreter updates the operator bound (guardian.interp). Raises
        StateCorrupt for an unreadable file (never ignored)."""
        return load_bindings(self.paths.interpreters)

    async def preflight(self, release: Release, deadline: float | None = None
                        ) -> dict[str, Any]:
        """The candidate's preflight, within ``deadline`` (default: the whole
        preflight deadline). Raises PreflightFailed / PreflightTimeout."""
        return await preflight(release, self.deadline if deadline is None else deadline)

    async def schemas_of(self, release_id: str) -> dict[str, Any]:
        """The formats release ``release_id`` reads and writes (from its preflight, run
        once per release). A release that cannot be verified or asked now (its
        interpreter was updated, say) is taken to write what releases wrote before
        declarations (LEGACY); the guardian logs that it did so."""
        if release_id not in self.declared:
            try:
                report = await self.preflight(await asyncio.to_thread(self.release,
                                                                      release_id))
            except TenureError as exc:
                log.warning("the formats of release %s are unknown (%s); taking format 1",
                            release_id, exc)
                return LEGACY
            self.declared[release_id] = declared(report)
        return self.declared[release_id]

    def read_checkpoint(self, activation: str) -> dict[str, Any]:
        """Raises FileNotFoundError, UnsafePath, StateCorrupt (never KeyError)."""
        return read_checkpoint(self.paths.checkpoint_file(activation))

    # -- generations ------------------------------------------------------------------

    async def launch(self, act: Activation, epoch: int, mode: str,
                     checkpoint: str | None = None, cursor: int = 0,
                     standby: BackendProcess | None = None) -> BackendProcess:
        """Write the handoff record and start the generation (or activate the standby
        started for it); wait for READY. Raises TenureError; the process is gone then."""
        assert self.owner_identity is not None
        # a standby of this release was verified when it started and its code runs
        # already: verifying the release again here would only lengthen the pause
        warm = standby is not None and standby.alive() and standby.release == act.release
        release = None if warm else await asyncio.to_thread(self.release, act.release)
        if await self.live_backend() is not None:
            raise HandoffFailed("a backend still answers on api.sock; refusing to start a "
                                "second one beside it")
        write_handoff(self.paths.handoff_file(act.id), pack_handoff(
            activation=act.id, mode=mode, epoch=epoch, release=act.release,
            owner=self.owner_identity.to_wire(), checkpoint=checkpoint, cursor=cursor,
            grant=self.state.signed_grant(epoch)))
        bp = await self.start_generation(act, release, standby)
        bp.up_since = self.clock()
        self.watch(bp)
        return bp

    async def start_generation(self, act: Activation, release: Release | None,
                               standby: BackendProcess | None) -> BackendProcess:
        """The process part of :meth:`launch` (its handoff record is written): activate
        the standby, or start the release (verified now when ``release`` is None: the
        standby it was counting on died); wait for READY (the seam fakes replace)."""
        if standby is not None and standby.alive():
            self.candidate = standby
            await standby.activate(act.id, self.deadline)
            return standby
        if standby is not None:
            await standby.stop(kill_after=2.0)
        if release is None:
            release = await asyncio.to_thread(self.release, act.release)
        return await BackendProcess.start(release, self.paths.home, act.id, self.paths.logs,
                                          self.deadline, on_spawn=self._set_candidate)

    def _set_candidate(self, bp: BackendProcess) -> None:
        self.candidate = bp

    async def live_backend(self) -> dict[str, Any] | None:
        """The status of whatever generation answers on api.sock, or None when nobody is
        there: no socket file, a refused connect (the socket of a generation that
        died), a listener that is gone. Raises BackendUnavailable (``data.silent``,
        ``data.pid``) when a living process holds api.sock but gives no answer within
        LIVE_CHECK_S (stopped, hung, overloaded): a generation that may still act, which
        a new one must neither be started beside nor fence off (it would hold the
        socket, and find itself cut off once it resumes)."""
        if not os.path.exists(self.paths.api_sock):
            return None
        try:
            status: dict[str, Any] = await control(self.paths.api_sock, "generation.status",
                                                   timeout=min(LIVE_CHECK_S, self.deadline))
            return status
        except TenureError as exc:
            listening, pid = _listener(self.paths.api_sock)
            if not listening:
                return None
            raise _silent(pid, exc) from None

    async def verify_generation(self, epoch: int, checkpoint: dict[str, Any] | None,
                                bp: BackendProcess | None = None) -> dict[str, Any]:
        """Owner identity, epoch and (with a checkpoint) inventory — pids, start ticks and
        restart counts — must equal what was handed over. Raises Uncertain; when the
        generation ``bp`` cannot be asked because it exited after its READY,
        HandoffFailed saying so (BackendProcess.gone_error), not the refused connect.
        The generation ``bp`` this guardian started reporting another epoch than its
        own, or not ready, is HandoffFailed too: its fault, not doubt about the world
        (the owner's identity and inventory are what a restore must prove)."""
        try:
            st = await self.control("generation.status")
        except TenureError as exc:
            err = exc if bp is None else await bp.gone_error(exc)
            if err is exc:
                raise
            raise err from exc
        assert self.owner_identity is not None
        if st["owner"] != self.owner_identity.to_wire():
            raise Uncertain("the new generation is attached to another owner")
        if st["epoch"] != epoch or not st["ready"]:
            wrong = HandoffFailed if bp is not None else Uncertain
            raise wrong(f"the new generation says it holds epoch {st['epoch']}, not "
                        f"{epoch}" if st["epoch"] != epoch else
                        "the new generation says it is not ready after its READY",
                        {"epoch": st["epoch"], "expected": epoch, "ready": st["ready"]})
        if checkpoint is not None:
            missing = set(st["adoption"]["missing"])
            want = [_essential(r) for r in checkpoint["inventory"]
                    if r["launch_key"] not in missing]
            got = [_essential(r) for r in st["adoption"]["adopted"]
                   if r["launch_key"] not in missing]
            if want != got:
                raise Uncertain("the adopted inventory differs from the checkpoint",
                                {"checkpoint": len(want), "adopted": len(got)})
        return {"launches": len(st["inventory"]), "missing": sorted(st["adoption"]["missing"]),
                "config_revision": st.get("config_revision")}

    async def resume_incumbent(self, incumbent: BackendProcess | None) -> None:
        """The abort path: the incumbent serves again. A failure is logged; a dead
        incumbent is recovered by its exit watcher."""
        if incumbent is None or not incumbent.alive():
            return
        try:
            await self.control("generation.resume")
        except TenureError as exc:
            log.error("could not resume the incumbent: %s", exc)

    async def stop_generations(self, incumbent: BackendProcess | None) -> None:
        """Stop the (fenced) incumbent and whatever generation is current; afterwards no
        generation acts."""
        self.end_streak_if_stable(self.current)
        for bp in (incumbent, self.candidate, self.current):
            if bp is not None:
                bp.expected_exit = True
                await bp.stop(kill_after=5.0)
        self.current = None
        self.candidate = None

    def watch(self, bp: BackendProcess) -> None:
        if self.current is not bp:
            self.end_streak_if_stable(self.current)
        self.current = bp
        self.spawn(self._on_exit(bp), f"exit watcher of {bp.pid}")

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        """A background task that never dies silently: an exception is logged with its
        traceback and marks the guardian unhealthy in its diagnostics."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        log.error("guardian task %s died", task.get_name(), exc_info=exc)
        err = GuardianFault.wrap(exc) if isinstance(exc, Exception) else GuardianFault(str(exc))
        self.unhealthy = {"task": task.get_name(), "code": err.code_str, "reason": err.msg,
                          "at": time.time()}
        self.write_diagnostics()

    def check_home(self) -> None:
        """End the guardian (end_home_lost) if its home was lost, before anything is
        recovered or written by path."""
        if self.home_mark is None or self.end_home_lost is None:
            return
        with contextlib.suppress(OSError):   # cannot look: the watch says so, goes on
            end_if_lost(self.home_mark, self.end_home_lost)

    async def cancel_tasks(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _on_exit(self, bp: BackendProcess) -> None:
        await bp.exited.wait()
        if bp.expected_exit or self.current is not bp:
            return
        log.error("backend generation %s (pid %d) exited unexpectedly (status %s)",
                  bp.activation, bp.pid, bp.returncode)
        self.check_home()   # a generation that saw its home lost first exits by itself
        self.current = None
        self.write_diagnostics()
        from .cold import recover_after_exit
        await recover_after_exit(self, bp)

    def uptime(self, bp: BackendProcess) -> float | None:
        """How long ``bp`` has been up since its start (until now: call it at its exit),
        or None when unknown (a generation adopted at the guardian's start)."""
        return None if bp.up_since is None else self.clock() - bp.up_since

    def end_streak_if_stable(self, bp: BackendProcess | None) -> None:
        """A generation leaving control that stayed up stable_s ends the streak of failed
        recovery attempts (guardian.cold)."""
        ran = None if bp is None else self.uptime(bp)
        if ran is not None and ran >= self.stable_s:
            self.end_streak()

    def end_streak(self) -> None:
        """No failed recovery attempt counts any more (guardian.cold)."""
        self.recovery_attempts = self.recovery_crashes = 0

    # -- diagnostics ------------------------------------------------------------------

    def certificate(self) -> dict[str, Any]:
        from .recovery import read_certificate
        return read_certificate(self.paths.recovery_db)

    def certificate_refusal(self, cert: dict[str, Any], selected: str | None) -> str | None:
        """Why recovery would refuse ``cert`` although it is marked valid (right after
        an upgrade it is the previous release's until the new generation certifies),
        with ``selected`` the selected release; None when it would not, or when it is
        not valid anyway."""
        body = cert.get("body")
        if not cert.get("valid") or not isinstance(body, dict):
            return None
        from .recovery import refusal
        owner = self.owner_identity.to_wire() if self.owner_identity else None
        return refusal(body, selected, owner,
                       self.state.grant_for(str(body.get("activation"))))

    def prune(self) -> int:
        """After an activation: old files (prune_files) and the finished activations
        beyond ``[retention] activations``. Returns how many files were removed."""
        running = self.current.activation if self.current is not None else None
        try:
            self.state.prune(activations_to_keep(self.paths.backend_db),
                             {running} if running else set())
        except (TenureError, OSError, sqlite3.Error) as exc:  # the next round tries again
            log.warning("could not prune old activations: %s", exc)
        return self.prune_files()

    def prune_files(self, keep: int = KEEP_ARTIFACTS) -> int:
        """guardian.retention.prune_artifacts, sparing the running generation's files."""
        running = self.current.activation if self.current is not None else None
        return prune_artifacts(self.paths, self.state, running, keep)

    def write_diagnostics(self, state: dict[str, Any] | None = None) -> None:
        """supervisor-state.json now (guardian.diagnostics; never raises); ``state``: a
        :meth:`status` made just now."""
        self.diagnostics.write(state)

    def diagnostics_soon(self) -> None:
        """supervisor-state.json shortly, once for every call until then."""
        self.diagnostics.soon()

    def status(self) -> dict[str, Any]:
        """What supervisor-state.json says, built now from this guardian's memory: on a
        full disk its write fails, and the file read back showed a backend gone and a
        recovery blocked since as alive and ready."""
        return snapshot(self)

    async def take(self, purpose: str) -> None:
        """One command at a time, in this guardian and across processes (the lease):
        a removal of releases, which holds no command lock, refuses an upgrade too (it
        could remove the release the upgrade selects). :meth:`give_back` ends it."""
        if self.command_lock.locked() or self.commanding is not None:
            running = self.commanding or "another command"
            raise OperationInProgress(f"{running} runs ({purpose} refused)",
                                      {"purpose": running})
        self.state.take_lease(self.identity, purpose)
        self.commanding = purpose

    def give_back(self) -> None:
        """End the command :meth:`take` began: the lease is released (a failure to write
        that is left to the next command, which takes it over from this holder)."""
        self.commanding = None
        self.state.release_lease(self.identity)

    def home(self) -> Path:
        return self.paths.home


def _essential(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["launch_key"], r["pid"], r["start_ticks"], r["restarts"])


def _listener(path: str) -> tuple[bool, int | None]:
    """Whether a living process listens on the Unix socket ``path``, and its pid, asked
    without waiting: the kernel's record of the listener (SO_PEERCRED of a connection
    not yet accepted), which a stopped or hung process keeps, since the kernel queues
    the connection for it. ``(False, None)``: no file, a refused connect (nobody
    listens), a listener that is gone. ``(True, None)``: its queue is full, so busy
    but there; its pid cannot be had that way."""
    kind = socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
    with socket.socket(socket.AF_UNIX, kind) as probe:
        try:
            probe.connect(path)
        except BlockingIOError:
            return True, None
        except OSError:   # ENOENT, ECONNREFUSED: nobody listens there
            return False, None
        pid = peer_credentials(probe).pid
    st = read_stat(pid)
    return (st is not None and not st.zombie), pid


def _silent(pid: int | None, exc: TenureError) -> BackendUnavailable:
    """BackendUnavailable for the living process ``pid`` that holds api.sock and did
    not answer (``exc``), saying what /proc shows of it (guardian.cold.next_step says
    what the operator does)."""
    if pid is None:
        return BackendUnavailable(
            f"a backend holds api.sock but does not answer ({exc.code_str}: its queue is "
            "full); it was not fenced off, and no generation starts beside it",
            {"silent": True, "pid": None, "cause": exc.code_str})
    return BackendUnavailable(
        f"backend pid {pid} is alive but does not answer ({exc.code_str}): "
        f"{silence(pid)}; it was not fenced off, and no generation starts beside it",
        {"silent": True, "pid": pid, "cause": exc.code_str})
