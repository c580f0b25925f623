"""Cold starts: the first start, crash recovery from the recovery certificate, and
following a replaced owner. One generation starts under a fresh epoch:
created → fenced → started → verified → complete.

A cold start that fails after its fence stops its generation (``failed``, or ``uncertain``
when identity or inventory cannot be proven); recovery retries with backoff and then
records ``blocked`` with the reason, at once for what no retry mends (:func:`retryable`).
A generation that crashes within STABLE_S of its start counts as such a failed attempt
too (:func:`recover_after_exit`): a release whose backend starts and then dies is not
restarted for ever.
Recovery refuses what the certificate does not cover: another owner instance, another
live inventory, another release, or a grant the owner accepted since for a generation
that completed; automatic recovery never guesses.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol.errors import (
    BackendUnavailable,
    GuardianFault,
    HandoffFailed,
    IdentityError,
    NotFound,
    OwnerChanged,
    RecoveryBlocked,
    StateCorrupt,
    TenureError,
    Uncertain,
    UnsafePath,
)
from protocol.link import Link, LinkEvent
from protocol.storage import storage_failure

from .phases import Kind, Outcome, Phase, ending
from .recovery import digest
from .state import Activation

if TYPE_CHECKING:
    from .backendproc import BackendProcess
    from .coordinator import Coordinator

__all__ = ["POINTS", "Check", "block", "recover_after_exit", "recover_safely",
           "recovery_check", "retryable", "start_selected", "watch_owner"]

log = logging.getLogger("tenure.guardian")

RECOVERY_BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
# How long a recovered generation must stay up for its start to count as a success (and
# end the streak of failed attempts). A start that passed verification proves little: a
# release can die moments later (a timer, the first certificate, the first observation),
# and resetting the count then restarted it for ever, every 1.5 s. 60 s is the order of
# the whole backoff ladder (about 61 s): a backend that keeps dying within a minute of its
# start is given the seven attempts a failing start gets, and then blocks; one that runs a
# minute has certified (every 5 s) and served, so its crash is a new event, recovered at
# once. (The apps' restart backoff resets after 30 s up, `reset_after`; a whole backend is
# held to twice that, its start alone taking up to BACKEND_START_TIMEOUT, 30 s.)
STABLE_S = 60.0
WATCH_EVERY_S = 1.0     # the owner watch's rounds
WATCH_TIMEOUT_S = 5.0   # the owner watch's wait for one answer
NOTHING_RUNS = "no applications run"
POINTS = ("recover.check", "start.fence", "start.launch", "start.verify")


async def start_selected(co: Coordinator, kind: Kind = Kind.START, cursor: int = 0,
                         expect: dict[str, Any] | None = None,
                         detail: dict[str, Any] | None = None) -> Activation:
    """Start the selected release under a fresh epoch. ``expect`` (a certificate body)
    adds its config revision to what is verified. Raises the failure after recording
    the ending the table gives (its generation stopped)."""
    sel = co.state.selector()
    if sel.current is None:
        raise NotFound("no release is selected; install and select one first")
    act = co.state.create_activation(kind, sel.current, None, None, detail)
    try:
        co.point("start.fence")
        epoch = await co.fence_proven(act)
        act = co.advance(act, Phase.FENCED, epoch=epoch)
        co.point("start.launch")
        bp = await co.launch(act, epoch, str(kind), cursor=cursor,
                             standby=await co.take_spare(sel.current))
        act = co.advance(act, Phase.STARTED, backend_pid=bp.pid)
        co.point("start.verify")
        detail = await co.verify_generation(epoch, None, bp)
        _check_config(expect, detail)
        act = co.advance(act, Phase.VERIFIED, detail)
        act = co.advance(act, Phase.COMPLETE, outcome=Outcome.SUCCESS)
    except Exception as exc:
        err = GuardianFault.wrap(exc)
        if not isinstance(exc, TenureError):
            log.exception("start %s: unexpected error", act.id)
        act = co.state.activation(act.id)
        if act.phase is not Phase.CREATED:
            await co.stop_generations(None)
        end = Phase.UNCERTAIN if isinstance(err, IdentityError | Uncertain) \
            else ending(act.kind, act.phase)
        co.end(act, end, err)
        raise err from None
    finally:
        co.candidate = None
    # the streak of failed attempts goes on: it ends only once a generation stayed up
    # STABLE_S (Coordinator.end_streak_if_stable), not when one merely started
    co.blocked = co.recovery_failing = None
    co.prune()
    co.diagnostics_soon()   # written with the last phase's, after the start
    return act


def _check_config(expect: dict[str, Any] | None, detail: dict[str, Any]) -> None:
    if expect is None or "config_revision" not in expect:
        return
    if detail.get("config_revision") != expect["config_revision"]:
        raise Uncertain("the recovered generation runs another config revision than the "
                        "certificate vouches for",
                        {"certificate": expect["config_revision"],
                         "generation": detail.get("config_revision")})


async def recover_safely(co: Coordinator, force: bool = False,
                         evidence: str | None = None,
                         before: dict[str, Any] | None = None,
                         checked: str | None = None) -> Activation | None:
    """:func:`recover_after_crash` that never leaves the guardian stuck: anything that
    goes wrong is recorded as a ``blocked`` recovery with its reason. ``force`` (with the
    path of the reviewed plan as ``evidence``) adopts what the certificate does not
    cover. ``before``: what happened first (a generation retired at the guardian's
    start, and why), for the first receipt of the generation that starts. ``checked``:
    a release that passed the checks of a release change just now (guardian.selection);
    a certificate of another release then covers it."""
    try:
        return await recover_after_crash(co, force, evidence, before, checked)
    except Exception as exc:
        err = GuardianFault.wrap(exc)
        if not isinstance(exc, TenureError):
            log.exception("recovery: unexpected error")
        block(co, err)
        return None


def next_step(err: TenureError) -> str:
    """What the operator runs once a recovery blocked on ``err``: a release that does
    not verify is replaced (a recovery of it would block again), else the recovery is
    run by hand (``--dry-run`` first when the certificate does not cover the world)."""
    release = err.data.get("release")
    crashed = err.data.get("crashed_release")
    if err.data.get("silent"):   # a living backend holds api.sock: never raced
        pid = err.data.get("pid")   # guardian.boot.retry_silent: asked again every 2 s
        return (f"`kill -CONT {pid}` if it is stopped, or stop it (`kill {pid}`): the "
                "guardian adopts it once it answers, or recovers from the certificate once "
                "it is gone" if isinstance(pid, int) else
                "nothing: the guardian adopts it once it answers, or recovers once it is "
                "gone")
    if isinstance(crashed, str):   # it starts, then dies: another release, or a fix
        return ("`tenure release select` another installed one (it starts it; the one "
                "that ran before is usually still installed: `tenure release list`), or "
                "`tenure backend recover` once the cause is fixed")
    if err.data.get("needs") == "config":   # backend.db set aside while apps run
        return "`tenure backend recover --config FILE` (FILE: the config the apps run by)"
    if err.code_str == "INTERPRETER_CHANGED":
        return ("`tenure release rebind` (the Python the releases run under changed), or "
                "`tenure release select` a release sealed for it")
    if isinstance(release, str) and err.code_str == "NOT_FOUND":
        return (f"`tenure release install` release {release[:12]} again, then `tenure "
                "backend recover`; or `tenure release select` another installed one (it "
                "starts it)")
    if isinstance(release, str):   # its installed copy is damaged: install mends it
        return (f"`tenure release install` release {release[:12]} again from its sealed "
                "directory (it replaces the damaged copy), then `tenure backend recover`; "
                "or `tenure release select` another installed one (it starts it)")
    if err.code_str == "RECOVERY_BLOCKED":
        return ("`tenure backend recover --dry-run` shows what a forced recovery would "
                "adopt")
    return "once that is fixed, `tenure backend recover`"


def block(co: Coordinator, err: TenureError, reason: str | None = None) -> None:
    """Record recovery blocked on ``err`` (``reason``: its message, or more), with what
    the operator runs next (:func:`next_step`)."""
    code, reason, then = err.code_str, reason or err.msg, next_step(err)
    log.error("recovery blocked: %s; %s", reason, then)
    try:
        act = co.state.create_activation(Kind.RECOVER, co.state.selector().current or "",
                                         None, None)
        co.end(act, Phase.BLOCKED, RecoveryBlocked(reason, {"cause": code}))
    except Exception:  # state.db itself failed: the diagnostics still say blocked
        log.exception("could not record the blocked recovery")
    co.blocked = {"code": code, "reason": reason, "at": time.time(), "next": then,
                  **({"needs": err.data["needs"]} if "needs" in err.data else {}),
                  # a living backend that did not answer: guardian.boot.retry_silent
                  **({"silent_pid": err.data.get("pid")} if err.data.get("silent") else {})}
    co.recovery_failing = None
    co.write_diagnostics()


@dataclass(frozen=True)
class Check:
    """What the recovery check found: ``ok`` (the certificate covers the world, or no
    application runs), why, and where a recovered generation resumes."""

    ok: bool
    reason: str
    nothing_runs: bool = False
    cursor: int = 0
    body: dict[str, Any] | None = None


async def recovery_check(co: Coordinator, checked: str | None = None) -> Check:
    """Whether the certificate covers the world as it is now (``checked``: see
    :func:`recover_safely`)."""
    co.point("recover.check")
    inv = (await co.owner_call("inventory"))["launches"]
    if not inv:
        return Check(True, NOTHING_RUNS, nothing_runs=True)
    cert = co.certificate()
    body = cert.get("body") or {}
    if cert.get("damaged"):
        return Check(False, f"the recovery certificate cannot be read: {cert['damaged']}")
    if not cert.get("valid"):
        return Check(False, "no valid recovery certificate (the backend was busy)")
    reason = await _uncovered(co, body, inv, checked)
    if reason is not None:
        return Check(False, reason)
    return Check(True, "inventory matches the certificate", cursor=int(body.get("cursor", 0)),
                 body=body)


async def _uncovered(co: Coordinator, body: dict[str, Any], inv: list[dict[str, Any]],
                     checked: str | None = None) -> str | None:
    """What of the world the certificate does not vouch for, or None. A certificate
    of another release than the selected one covers it only when the selected release
    is ``checked`` (guardian.selection says why)."""
    assert co.owner_identity is not None
    if body.get("owner") != co.owner_identity.to_wire():
        return "the certificate names another owner instance"
    if body.get("inventory_digest") != digest(inv):
        return "the owner's live inventory differs from the certificate"
    selected = co.state.selector().current
    if body.get("release") != selected and checked != selected:
        return ("the certificate was written by another release than the selected one "
                f"(release {str(body.get('release'))[:12]} wrote it); `tenure release "
                f"select {selected}` checks the selected release against this state "
                "and starts it")
    epoch = body.get("epoch")
    if not isinstance(epoch, int) or co.state.grant_for(str(body.get("activation"))) != epoch:
        return "the certificate names a grant this guardian never issued"
    for act in co.state.activations_granted_after(epoch):
        if act.phase is Phase.COMPLETE and not _carried(co, act, body):
            return (f"generation {act.id} completed under a later grant without "
                    "certifying; the certificate is stale")
    return None


def _carried(co: Coordinator, act: Activation, body: dict[str, Any]) -> bool:
    """Whether a generation that completed after the certificate took over exactly the
    world it vouches for (so, not having invalidated it, it changed nothing): a handoff
    whose checkpoint has the certificate's inventory digest, or a recovery admitted by
    this very certificate."""
    receipts = co.state.receipts(act.id)
    if act.kind is Kind.RESTORE:
        source = co.state.restored_by(act.id)
        receipts = co.state.receipts(source) if source else []
    if act.kind in (Kind.START, Kind.RECOVER):
        created = receipts[0]["detail"] if receipts else {}
        return bool(created.get("certified_by") == body.get("activation")
                    and created.get("inventory_digest") == body.get("inventory_digest"))
    return any(r["phase"] == Phase.CHECKPOINTED and
               r["detail"].get("inventory_digest") == body.get("inventory_digest")
               for r in receipts)


async def recover_after_crash(co: Coordinator, force: bool = False,
                              evidence: str | None = None,
                              before: dict[str, Any] | None = None,
                              checked: str | None = None) -> Activation | None:
    """Restart the selected release under a fresh epoch when the certificate covers the
    world (or ``force``), else block. With no application running this is a first start.
    ``before`` is added to its first receipt, ``checked`` as :func:`recover_safely`
    says."""
    if await _backend_in_the_way(co):
        return _adopted(co)
    check: Check | None = None
    while True:
        try:
            if check is None:   # once: a failed start may have invalidated the certificate
                # inside the attempts: an owner that stalls for a moment (TRANSPORT_LOST)
                # blocked the recovery for good, the certificate still valid
                check = await recovery_check(co, checked)
                if not check.ok and not force:
                    block(co, RecoveryBlocked(check.reason))
                    return None
            kind = Kind.START if check.nothing_runs else Kind.RECOVER
            detail = {**(_admission(check, force, evidence) or {}), **(before or {})}
            return await start_selected(co, kind, check.cursor, expect=check.body,
                                        detail=detail or None)
        except Exception as raw:   # a full disk (state.db) is an attempt that failed too,
            # unless it cut short the ending of a start, whose generation may still run
            exc = raw if isinstance(raw, TenureError) else \
                storage_failure(raw, "the recovery") if co.current is None else None
            if exc is None:
                raise   # a defect, or that: recover_safely blocks, saying so
            if not retryable(exc):
                block(co, exc)
                return None
            delay = _failed_attempt(co, exc)
            if delay is None:
                block(co, exc, f"{exc.msg} (after {co.recovery_attempts} attempts)")
                return None
            log.error("recovery attempt failed (%s); retrying in %g s", exc, delay)
            if await _owner_replaced_within(co, delay):
                log.warning("the owner was replaced while the recovery failed; trying at "
                            "once under the new owner instance")
                await _attach_new_owner(co)
                check = None   # asked again of the new owner


async def _owner_replaced_within(co: Coordinator, delay: float) -> bool:
    """Wait ``delay`` s before the next attempt of a failing recovery (``co.sleep``),
    asking the owner every WATCH_EVERY_S meanwhile: True as soon as another owner
    instance answers (an owner maintenance window went back to the release it ran
    before, say); the attempts so far failed against the one that is gone. Was: the
    whole backoff was waited, and the owner watch, held behind this recovery, followed
    the new owner only once the recovery had blocked."""
    async def replaced() -> None:
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            try:
                await co.owner_call("status", timeout=WATCH_TIMEOUT_S)
            except OwnerChanged:
                return
            except TenureError:
                pass   # gone, or not there yet: the next attempt says so
    watch, wait = asyncio.ensure_future(replaced()), asyncio.ensure_future(co.sleep(delay))
    try:
        await asyncio.wait((watch, wait), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (watch, wait):
            task.cancel()
        await asyncio.gather(watch, wait, return_exceptions=True)
    if watch.cancelled():
        return False
    if watch.exception() is not None:   # a defect: said, and the backoff waited whole
        log.error("asking the owner during the recovery's backoff failed: %r",
                  watch.exception())
        await co.sleep(delay)
        return False
    return True


async def _backend_in_the_way(co: Coordinator) -> bool:
    """Whether a generation found on api.sock ends this recovery before it starts one
    (at a guardian's start, `tenure backend recover` or `release select` after a
    recovery blocked on a backend that did not answer). One that answers is taken over
    as a guardian's start takes it over (guardian.boot.take_over): adopted (True), or
    retired (False: the recovery goes on). One that is alive and does not answer blocks
    the recovery at once, saying so (True): a fence would cut it off, and a new
    generation could not bind beside it. Raises what live_backend raises otherwise."""
    try:
        live = await co.live_backend()
    except BackendUnavailable as exc:
        if not exc.data.get("silent"):
            raise
        block(co, exc)
        return True
    if live is None:
        return False
    # boot starts recoveries, so it is imported only when needed
    from .boot import take_over
    return await take_over(co, live)


def _adopted(co: Coordinator) -> Activation | None:
    """The activation of the generation just adopted, None when none was (blocked) or
    its activation is not on record."""
    if co.current is None:
        return None
    try:
        return co.state.activation(co.current.activation)
    except NotFound:
        return None


def _streak_of(co: Coordinator, release: str | None) -> None:
    """The streak of failed attempts counts the failures of one release: a failure of
    another (`tenure release select` took the way out of a crash loop, or of a block)
    ends the streak before it is counted, so the new release is given its own backoff
    and is not blocked at once for the crashes of the one before."""
    if co.recovery_release != release:
        co.end_streak()
        co.recovery_release = release


def _failed_attempt(co: Coordinator, exc: TenureError) -> float | None:
    """Count one failed attempt (ended by ``exc``) of the streak; the wait before the
    next one, said in the diagnostics, or None when that was the last of
    len(backoff) + 1 (its caller blocks)."""
    _streak_of(co, co.state.selector().current)
    co.recovery_attempts += 1
    if co.recovery_attempts > len(co.backoff):
        return None
    delay = co.backoff[co.recovery_attempts - 1]
    co.recovery_failing = {"attempt": co.recovery_attempts,
                           "attempts": len(co.backoff) + 1,
                           "error": f"{exc.code_str}: {exc.msg}",
                           "retry_at": time.time() + delay}
    co.write_diagnostics()
    return delay


async def recover_after_exit(co: Coordinator, bp: BackendProcess) -> None:
    """Recover after generation ``bp`` exited unexpectedly (its exit watcher). One that
    stayed up STABLE_S (or was adopted: how long it ran is unknown) ends the streak of
    failed attempts and is recovered at once. One that crashed sooner counts as a failed
    attempt, as a start that fails does: the next one waits 1, 2, 4, 8, 16, 30 s, and
    after the last recovery blocks, saying so. The wait holds no lock, so the operator's
    `tenure release select` or `backend recover` may land meanwhile (no backend runs);
    the waiting recovery then starts nothing."""
    async with co.command_lock:
        if co.current is not None or co.blocked is not None:
            return  # a flow brought another generation, or the operator must decide
        ran = co.uptime(bp)
        if ran is None or ran >= co.stable_s:
            co.end_streak()
            await recover_safely(co)
            return
        try:
            delay = _crashed_early(co, bp, ran)
        except Exception as exc:   # never an exit watcher that dies: blocked, saying why
            log.exception("recovery: unexpected error")
            block(co, GuardianFault.wrap(exc))
            return
        if delay is None:
            return   # blocked
        failing = co.recovery_failing
    await co.sleep(delay)
    async with co.command_lock:
        if co.current is not None or co.blocked is not None or \
                co.recovery_failing is not failing:
            return  # the operator (or a new owner) came first
        await recover_safely(co)


def _crashed_early(co: Coordinator, bp: BackendProcess, ran: float) -> float | None:
    """Count the crash of ``bp``, ``ran`` s after its start, as a failed attempt; the
    wait before the next one, or None when that was the last (recovery blocked)."""
    release = co.state.selector().current or ""
    _streak_of(co, release)
    co.recovery_crashes += 1
    msg, data = bp.ended_why(f"backend generation {bp.activation} (pid {bp.pid}) "
                             f"exited {ran:.1f} s after it started")
    exc = HandoffFailed(msg, {**data, "crashed_release": release})
    delay = _failed_attempt(co, exc)
    if delay is None:
        also = "" if co.recovery_crashes == co.recovery_attempts else \
            f" ({co.recovery_attempts} failed attempts in a row)"
        block(co, exc, f"the backend of release {release[:12]} crashed "
                        f"{co.recovery_crashes} times within {co.stable_s:g} s of "
                        f"starting{also}: {exc.msg}")
        return None
    log.error("recovery attempt %d of %d failed (a start counts once it stayed up %g s): "
              "%s; retrying in %g s", co.recovery_attempts, len(co.backoff) + 1,
              co.stable_s, exc.msg, delay)
    return delay


def retryable(exc: TenureError) -> bool:
    """Whether another attempt of a failed start may succeed without anyone doing
    anything. Not when identity or inventory cannot be proven, nothing is selected, or
    a state file is unsafe (UNSAFE_PATH: a symlink, another user's, open to others) or
    damaged (STATE_CORRUPT: every durable write is atomic, so a file that does not read
    stays so): that stays so until the operator looks, so the recovery blocks at once
    with that error instead of retrying for a minute, and `tenure up` says so as soon."""
    return not isinstance(exc, IdentityError | Uncertain | NotFound | UnsafePath |
                          StateCorrupt)


def _admission(check: Check, force: bool, evidence: str | None) -> dict[str, Any] | None:
    """What admitted a recovery, for its first receipt: the certificate that covered the
    world, or the reviewed plan of a forced one."""
    if force and not check.ok:
        return {"forced": True, "evidence": evidence, "uncovered": check.reason}
    if check.body is not None:
        return {"certified_by": check.body.get("activation"),
                "inventory_digest": check.body.get("inventory_digest"),
                "certified_release": check.body.get("release")}
    return None


async def watch_owner(co: Coordinator) -> None:
    """Every second: is the owner there, still the same instance, and does it hold the
    grant of the generation in control? A new owner (after a maintenance restart) gets a
    fresh epoch and a new generation; a grant of another activation (a fence that landed
    after its handoff gave up) means the running generation is fenced off: it is
    replaced by a recovery. A round waits WATCH_TIMEOUT_S for the owner's answer (a
    stopped owner no longer holds the watch for the connection's 60 s); a run of rounds
    the owner does not answer is logged when it begins and when it ends. Nothing ends
    the watch."""
    failing = False
    while True:
        await asyncio.sleep(WATCH_EVERY_S)
        try:
            await _watch_once(co)
            if failing:
                log.info("the owner answers again")
            failing = False
        except asyncio.CancelledError:
            raise
        except OwnerChanged as exc:
            async with co.command_lock:
                if await _still_replaced(co):   # not followed meanwhile: not twice
                    co.owner_link.handle(LinkEvent.CHANGED, time.time(), exc.msg)
                    await follow_new_owner(co)
        except TenureError as exc:
            co.owner_link.exchange_failed(time.time(), exc.msg)
            co.write_diagnostics()
            if not failing:
                log.warning("owner unreachable: %s (asked again every second)", exc)
            failing = True
        except Exception:
            log.exception("owner watch: unexpected error (the watch goes on)")


async def _watch_once(co: Coordinator) -> None:
    st = await co.owner_call("status", timeout=WATCH_TIMEOUT_S)   # the link: seen
    co.write_diagnostics()
    held = (st.get("grant") or {}).get("activation")
    cur = co.current
    if cur is None or held is None or held == cur.activation or co.command_lock.locked():
        return
    async with co.command_lock:
        cur = co.current
        st = await co.owner_call("status", timeout=WATCH_TIMEOUT_S)
        held = (st.get("grant") or {}).get("activation")
        if cur is None or held is None or held == cur.activation:
            return
        log.error("the owner holds the grant of activation %s, not of generation %s in "
                  "control: that generation is fenced off; replacing it", held,
                  cur.activation)
        await co.stop_generations(None)
        await recover_safely(co)


async def _still_replaced(co: Coordinator) -> bool:
    """Whether the owner that answers is still another instance than the one attached
    (asked again under the command lock): a failing recovery that held the lock follows
    a replaced owner itself (:func:`_owner_replaced_within`), and its generation must
    not be stopped and recovered a second time. True also when it cannot be asked:
    following it says why."""
    try:
        await co.owner_call("status", timeout=WATCH_TIMEOUT_S)
    except TenureError:   # OwnerChanged, or not there: as before
        return True
    return False


async def follow_new_owner(co: Coordinator) -> None:
    log.warning("the owner was replaced; moving control to the new owner instance")
    await _attach_new_owner(co)
    co.blocked = None
    await recover_safely(co)


async def _attach_new_owner(co: Coordinator) -> None:
    """Stop what generation runs, connect to the owner instance that answers now (a new
    attachment), and start the streak of failed recovery attempts afresh: those before
    failed against the owner that is gone. Raises what connecting raises."""
    await co.stop_generations(None)
    if co.owner is not None:
        co.owner.unpin()
    await co.connect_owner()
    co.owner_link = Link(since=time.time(), seen=time.time())
    co.recovery_attempts = co.recovery_crashes = 0
    co.recovery_failing = None
