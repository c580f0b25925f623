"""Hot handoff: move control from the incumbent generation to a candidate release while
every application keeps running.

checked → admitted → draining → checkpointed → fenced → retired → started → verified →
complete. However it fails — a coded error, a hang that times out, an OS error, a
malformed record, a bug — the activation ends as guardian.phases says for the phase it
reached: before the fence the incumbent resumes (``aborted``); after it the candidate
is stopped and the previous release is restored under a fresh epoch from the same
checkpoint (``rolled_back``); when identity or inventory cannot be proven nothing else
is tried (``uncertain``) and the operator reconciles. Never a half-open activation.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from typing import Any

from protocol.backendstate import check_backend_state
from protocol.errors import (
    BackendUnavailable,
    GuardianFault,
    HandoffFailed,
    IdentityError,
    PreflightTimeout,
    StateCorrupt,
    TenureError,
    Uncertain,
    UnsafePath,
)
from protocol.handover import read_checkpoint

from .backendproc import BackendProcess
from .coordinator import Coordinator
from .phases import Kind, Outcome, Phase, ending, reaching
from .release import Release
from .schemas import check as check_schemas
from .schemas import declared, on_disk
from .selection import check_contracts
from .state import Activation

__all__ = ["CERTIFY_TRIES", "POINTS", "abort_requested_error", "after", "certify_new",
           "restore_previous", "upgrade"]

log = logging.getLogger("tenure.guardian")

CERTIFY_TRIES = 10   # how often a verified generation is asked for its first certificate,
CERTIFY_EVERY = 0.1  # and how many seconds apart
MIN_PREFLIGHT_S = 1.0  # less left of the preflight deadline than this: it timed out

# every await point of a handoff where the fault harness may inject (guardian.faults)
POINTS = ("check.owner", "check.preflight", "standby", "admit", "drain", "checkpoint",
          "fence", "retire", "retire.stop", "launch", "verify", "complete",
          "restore.fence", "restore.launch", "restore.verify")


def _holding(drained: dict[str, Any]) -> str:
    """What held a drain that did not end, as its answer names it (an older backend
    names no owner call: only their number)."""
    said = []
    if drained.get("steps"):
        said.append(f"steps still running: {'; '.join(map(str, drained['steps']))}")
    calls = drained.get("calls")
    if isinstance(calls, list) and calls:
        said.append(f"owner calls in flight: {'; '.join(map(str, calls))}")
    elif drained.get("in_flight"):
        said.append(f"{drained['in_flight']} owner call(s) in flight")
    return f" ({', '.join(said)})" if said else ""


def abort_requested_error() -> HandoffFailed:
    return HandoffFailed("aborted by the operator before the fence")


async def upgrade(co: Coordinator, release_id: str, check_only: bool = False,
                  kind: Kind = Kind.UPGRADE) -> dict[str, Any]:
    """Run one handoff to ``release_id``; returns the final activation and its receipts.
    Never raises for a failure of the handoff itself: the activation records it."""
    sel = co.state.selector()
    co.abort_requested = False  # an abort applies only to the handoff it was sent for
    act = co.state.create_activation(kind, release_id, sel.current, None)
    h = _Handoff(co, act, co.current, sel.revision)
    try:
        await h.run(check_only)
    except Exception as exc:  # the boundary: anything becomes the phase's ending
        await h.fail(exc)
    finally:
        co.abort_requested = False
        await h.drop_standby()
        co.candidate = None
    co.prune()
    return _result(co, co.state.activation(act.id))


class _Handoff:
    def __init__(self, co: Coordinator, act: Activation, incumbent: BackendProcess | None,
                 revision: int) -> None:
        self.co = co
        self.act = act
        self.incumbent = incumbent
        self.revision = revision
        self.standby: BackendProcess | None = None
        self.early: asyncio.Task[BackendProcess | None] | None = None  # the standby starting
        self.checkpoint: dict[str, Any] | None = None
        self.owner_epoch: int | None = None   # the owner's, as the check found it
        self.preflight_began = time.monotonic()  # the one preflight deadline runs from here
        co.incumbent = incumbent

    @property
    def path(self) -> str:
        return self.co.paths.checkpoint_file(self.act.id)

    async def run(self, check_only: bool) -> None:
        try:
            await self.check(stand_by=not check_only and self.incumbent is not None
                             and self.incumbent.alive())
        finally:
            await self.take_early()   # kept even when the check fails: upgrade() drops it
        if check_only:
            self.act = self.co.advance(self.act, Phase.COMPLETE, outcome=Outcome.CHECK_ONLY)
            return
        if self.incumbent is None or not self.incumbent.alive():
            raise BackendUnavailable(
                "no backend generation is running to hand over from: `tenure release "
                "select RELEASE` starts the release you name (for a rollback the previous "
                "one, which `tenure backend status` names), `tenure backend recover` the "
                "selected one again")
        self.co.point("standby")
        self.co.candidate = self.standby
        async with self.co.holding_link():
            await self.before_fence()
            await self.fence()
            await self.retire()
        await self.start_candidate()

    async def check(self, stand_by: bool) -> None:
        """``stand_by``: start the candidate's standby beside the rest of the check, from
        the release verified here: it holds nothing, and its start-up imports what a
        preflight imports, so its report serves as one (:meth:`preflight`). Its
        interpreter is prewarmed while the release is verified (it runs nothing of the
        release before that). Touches nothing (no drain, no grant) until every check
        passed: the candidate verifies, the release to roll back to verifies, the owner
        offers the contracts both the candidate's RUNTIME.json and its preflight report
        name, the schema gate passes, and the backend's state paths are ones a
        generation would start on (:meth:`check_state`). Raises what each check raises
        (CapabilityMissing, NotFound, StateCorrupt, UnsafePath, PreflightFailed,
        SchemaIncompatible, ...)."""
        co = self.co
        self.check_state()
        release, warm = await co.verify_warming(self.act.release, warm=stand_by)
        self.preflight_began = time.monotonic()
        if stand_by:
            self.early = asyncio.create_task(co.standby(release.id, release, warm))
        co.point("check.owner")
        owner = await co.owner_status()
        # for the fence: only this guardian moves the epoch, and its flows run one at a
        # time (the command lock), so no round trip for it is needed inside the pause
        self.owner_epoch = int(owner["epoch"])
        check_contracts(release, owner["capabilities"], who="the candidate")
        await self.check_rollback_target()
        co.point("check.preflight")
        report = await self.preflight(release)
        # what the candidate's code asks of the owner, which its manifest may not say
        check_contracts(release, owner["capabilities"], report, who="the candidate")
        co.declared[release.id] = declared(report)
        incumbent = co.state.selector().current
        theirs = await co.schemas_of(incumbent) if incumbent is not None and \
            self.incumbent is not None else None
        disk = await asyncio.to_thread(on_disk, co.paths.backend_db)
        check_schemas(co.declared[release.id], disk, theirs)
        self.act = co.advance(self.act, Phase.CHECKED, {"preflight": report,
                                                        "formats_on_disk": disk})

    def check_state(self) -> None:
        """The home, ``backend/``, backend.db and recovery.db must pass the check every
        generation's start makes (protocol.backendstate, read only: a few lstat calls,
        nothing created or changed). The candidate would refuse to start on them after
        the incumbent was retired, and so would the previous release restored after it:
        the handoff would end ``uncertain`` with no generation. Raises UnsafePath naming
        the path, what is wrong and how to put it right."""
        try:
            check_backend_state(self.co.paths)
        except UnsafePath as exc:
            raise UnsafePath(
                f"{exc.msg}. A backend generation would refuse to start on it, so the "
                "handoff did not begin and nothing was changed; retry once it is put "
                "right", exc.data) from exc
        except OSError as exc:
            raise UnsafePath(
                f"cannot check the backend's state paths ({exc}); a backend generation "
                "would not start on them, so the handoff did not begin; nothing was "
                "changed", {"path": exc.filename}) from exc

    async def check_rollback_target(self) -> None:
        """The release a failure after the fence restores (the selected one the
        incumbent runs) must be installed and verify as it would for that restore: a
        handoff that could not go back is refused while nothing is touched, instead of
        ending ``uncertain`` with no generation. Raises what verification raises
        (NotFound, StateCorrupt, UnsafePath, BadSignature, InterpreterChanged: the same
        class, its message naming the rollback target and what to do), StateCorrupt for
        an I/O error."""
        target = self.act.from_release
        if target is None or target == self.act.release:
            return   # nothing to go back to, or the candidate verified a moment ago
        try:
            await asyncio.to_thread(self.co.release, target)
        except (TenureError, OSError) as exc:
            err = exc if isinstance(exc, TenureError) else StateCorrupt(str(exc))
            mend = "install a copy of it signed by a trusted key (docs/releases.md, " \
                "\"Requiring signed releases\")" if err.code_str == "BAD_SIGNATURE" \
                else "`tenure release install` it again"
            raise type(err)(
                f"release {target}, the one to roll back to if the handoff fails after "
                f"the fence, cannot be restored: {err.msg}. {mend} (or, while no backend "
                "runs, `tenure release select` another); nothing was changed",
                {**err.data, "rollback_target": target}) from exc

    async def take_early(self) -> None:
        if self.early is not None:
            early, self.early = self.early, None
            self.standby = await early

    async def preflight(self, release: Release) -> dict[str, Any]:
        """The early standby's report when it gave one (older releases do not), else a
        preflight process of its own, within what is left of the one preflight deadline
        (co.deadline from when the standby started): a standby that hung until its
        deadline is the preflight that timed out, not a reason to wait as long again.
        Raises PreflightFailed / PreflightTimeout."""
        await self.take_early()
        bp = self.standby
        if bp is not None and bp.alive() and bp.report is not None:
            return {"elapsed": bp.started_s, "via": "standby", "report": bp.report}
        spent = time.monotonic() - self.preflight_began
        left = self.co.deadline - spent
        if left < MIN_PREFLIGHT_S:
            raise PreflightTimeout(
                f"preflight did not finish in {self.co.deadline:.0f} s (the candidate's "
                "standby gave no report in that time)", {"elapsed": round(spent, 3)})
        return await self.co.preflight(release, left)

    async def before_fence(self) -> None:
        """admitted → draining → checkpointed."""
        co = self.co
        co.point("admit")
        st = await co.control("generation.status")
        self.act = co.advance(self.act, Phase.ADMITTED, from_epoch=int(st["epoch"]))
        self.abort_point()
        co.point("drain")
        drained = await co.control("generation.drain", {"timeout": co.deadline},
                                   timeout=co.deadline + 5)
        if not drained["drained"]:
            raise HandoffFailed(f"the incumbent did not drain in time{_holding(drained)}",
                                drained)
        self.act = co.advance(self.act, Phase.DRAINING, drained)
        self.abort_point()
        co.point("checkpoint")
        cp = await co.control("generation.checkpoint", {"path": self.path})
        self.act = co.advance(self.act, Phase.CHECKPOINTED,
                              {"inventory_digest": cp["inventory_digest"],
                               "launches": cp["launches"]})
        self.abort_point()

    async def fence(self) -> None:
        self.co.point("fence")
        epoch = await self.co.fence_proven(self.act, self.owner_epoch)
        self.act = self.co.advance(self.act, Phase.FENCED, epoch=epoch)

    def abort_point(self) -> None:
        if self.co.abort_requested:
            self.co.abort_requested = False
            raise abort_requested_error()

    async def retire(self) -> None:
        """The incumbent is fenced already: whatever it answers, it is made to exit
        (SIGKILL at the end)."""
        co, incumbent = self.co, self.incumbent
        assert incumbent is not None
        incumbent.expected_exit = True
        co.point("retire")
        try:
            await co.control("generation.retire", timeout=min(10.0, co.deadline))
        except TenureError as exc:
            log.warning("the incumbent did not take the retire request (%s); stopping it", exc)
        co.point("retire.stop")
        # closed while the incumbent exits: closing yields to the loop, and between the
        # exit and the candidate's start nothing else should get a turn
        await co.drop_link()
        await incumbent.stop(term_after=min(10.0, co.deadline))
        if co.current is incumbent:
            co.current = None
        self.act = co.advance(self.act, Phase.RETIRED, {"pid": incumbent.pid,
                                                        "returncode": incumbent.returncode})

    async def start_candidate(self) -> None:
        """retired → started → verified → complete."""
        co = self.co
        epoch = self.act.epoch
        assert epoch is not None
        co.point("launch")
        standby, self.standby = self.standby, None
        bp = await co.launch(self.act, epoch, str(self.act.kind), checkpoint=self.path,
                             standby=standby)
        self.act = co.advance(self.act, Phase.STARTED, backend_pid=bp.pid)
        co.point("verify")
        # read here, not before the launch: only the verification needs it, and the
        # candidate's start is where the API pause ends (~1.2 ms with 200 apps)
        self.checkpoint = read_checkpoint(self.path)   # the incumbent wrote it: checked
        detail = await co.verify_generation(epoch, self.checkpoint, bp)
        self.act = co.advance(self.act, Phase.VERIFIED, detail)
        certified = await certify_new(co, bp)
        co.point("complete")
        self.act = co.advance(self.act, Phase.COMPLETE, {"certified": certified},
                              outcome=Outcome.SUCCESS, select=(self.act.release, self.revision))

    async def fail(self, exc: Exception) -> None:
        """End the activation as its phase requires. Never raises."""
        err = GuardianFault.wrap(exc)
        act = self.co.state.activation(self.act.id)
        where = reaching(act.kind, act.phase)   # the phase the docs name for it
        if isinstance(exc, TenureError):
            log.error("handoff %s failed in phase %s: %s", act.id, where, err)
        else:
            log.exception("handoff %s: unexpected error in phase %s", act.id, where)
        if act.final:
            return
        end = ending(act.kind, act.phase)
        try:
            if end is Phase.ABORTED:
                await self.drop_standby()
                await self.co.resume_incumbent(self.incumbent)
                self.co.end(act, Phase.ABORTED, err)
            elif end is Phase.ROLLED_BACK:
                await restore_previous(self.co, act, err, self.incumbent)
            else:
                self.co.end(act, end, err)
        except Exception as second:  # the ending itself broke: say so, act no further
            log.exception("handoff %s: could not finish its ending %s", act.id, end)
            self.co.end(self.co.state.activation(act.id), Phase.UNCERTAIN,
                        after(err, GuardianFault.wrap(second), f"ending it {end}"))

    async def drop_standby(self) -> None:
        bp, self.standby = self.standby, None
        if bp is not None and self.co.current is not bp:
            await bp.stop(kill_after=2.0)


async def restore_previous(co: Coordinator, act: Activation, cause: TenureError,
                           incumbent: BackendProcess | None = None) -> Activation:
    """After the fence: stop the incumbent (fenced) and the candidate, then start the
    previous release under a fresh epoch from the same checkpoint (a ``restore``
    activation). Unprovable identity or inventory, or no checkpoint, ends ``uncertain``
    and leaves no generation acting."""
    log.error("handoff %s failed after the fence (%s); restoring the previous release",
              act.id, cause)
    await co.stop_generations(incumbent)
    if isinstance(cause, IdentityError | Uncertain) or act.from_release is None:
        return co.end(act, Phase.UNCERTAIN, cause)
    try:
        checkpoint = co.read_checkpoint(act.id)
    except (OSError, TenureError) as exc:
        log.error("no usable checkpoint to restore from: %s", exc)
        return co.end(act, Phase.UNCERTAIN, after(cause, GuardianFault.wrap(exc),
                                                  "reading the checkpoint to restore from"))
    previous = co.state.create_activation(Kind.RESTORE, act.from_release, act.release, None,
                                          {"restores": act.id})
    try:
        co.point("restore.fence")
        epoch = await co.fence_proven(previous)
        previous = co.advance(previous, Phase.FENCED, epoch=epoch)
        co.point("restore.launch")
        bp = await co.launch(previous, epoch, str(Kind.RESTORE),
                             checkpoint=co.paths.checkpoint_file(act.id))
        previous = co.advance(previous, Phase.STARTED, backend_pid=bp.pid)
        co.point("restore.verify")
        detail = await co.verify_generation(epoch, checkpoint, bp)
        previous = co.advance(previous, Phase.VERIFIED, detail)
        co.advance(previous, Phase.COMPLETE, {"certified": await certify_new(co, bp)},
                   outcome=Outcome.SUCCESS)
    except Exception as exc:
        err = GuardianFault.wrap(exc)
        log.error("restoring the previous release failed: %s", err)
        await co.stop_generations(None)
        co.end(co.state.activation(previous.id), Phase.UNCERTAIN, err)
        return co.end(co.state.activation(act.id), Phase.UNCERTAIN,
                      after(cause, err, f"restoring release {act.from_release}"))
    return co.end(co.state.activation(act.id), Phase.ROLLED_BACK, cause)


def after(cause: TenureError, failed: TenureError, what: str) -> TenureError:
    """The error an activation ends with when ``what`` (its restore, its ending) failed
    after ``cause`` had failed it: ``failed``'s class and code (what left no generation
    acting, so what a recovery needs fixed first), a message naming both, and
    ``data.cause`` keeping the original error, so that the activation and its receipts
    say why the handoff failed at all, not only the log. Never raises."""
    err = copy.copy(failed)   # its class and fields (a remote code, a request id)
    err.msg = f"the handoff failed: {cause}; then {what} failed: {failed}"
    err.args = (err.msg,)
    err.data = {**failed.data, "cause": cause.to_wire()}
    return err


async def certify_new(co: Coordinator, bp: BackendProcess) -> bool:
    """Ask the generation just verified for its first recovery certificate, before its
    activation completes. Until it has one, the certificate on disk is its
    predecessor's — another grant and, after an upgrade, another release than the
    selected one — and recovery refuses it: a crash right after the handoff, the
    likeliest moment for a new release to crash, would be blocked. A generation
    certifies only when quiet, so it is asked again (CERTIFY_TRIES times, CERTIFY_EVERY
    apart, within CERTIFY_TRIES * CERTIFY_EVERY seconds all told: a call that does not
    answer in what is left ends the asking); when it still cannot, it keeps trying on
    its own (every 0.5 s until its first certificate). Returns whether a certificate
    of it vouches now. Raises, when the generation is gone, HandoffFailed saying it
    exited (BackendProcess.gone_error; the activation then fails where it is)."""
    for attempt in range(CERTIFY_TRIES):
        if attempt:
            await co.sleep(CERTIFY_EVERY)
        try:   # each call within what is left of the second all the tries may take
            left = CERTIFY_EVERY * (CERTIFY_TRIES - attempt)
            if (await co.control("generation.certify", timeout=left))["published"]:
                return True
        except TenureError as exc:
            if not bp.alive():
                raise await bp.gone_error(exc) from exc
            log.warning("generation %s could not certify now (%s); it certifies on its "
                        "own once it can", bp.activation, exc)
            return False
    log.warning("generation %s is not quiet enough to certify yet; until it is, recovery "
                "from a crash of it would be blocked", bp.activation)
    return False


def _result(co: Coordinator, act: Activation) -> dict[str, Any]:
    return {"activation": act.to_wire(), "receipts": co.state.receipts(act.id)}
