"""What a starting guardian does about the world it finds: a living backend is adopted
(never duplicated), an interrupted activation is finished from its row, its grant and its
checkpoint, and otherwise the selected release starts — or recovery is blocked.

An interrupted activation is judged by whether the owner holds *its* grant:
- not fenced yet and the owner does not hold its grant: nothing changed hands
  (``aborted``); whatever generation runs keeps control;
- the owner holds its grant (the fence landed, perhaps after the guardian died): the
  activation is carried forward from ``fenced`` — its generation is adopted and verified,
  or started; a failure gets the ending its kind's table names for that phase;
- after the fence but the owner holds another grant: ``uncertain``, the operator decides.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from protocol.errors import (
    BackendUnavailable,
    GuardianFault,
    HandoffFailed,
    TenureError,
    Uncertain,
)

from .backendproc import BackendProcess
from .cold import block, recover_safely
from .coordinator import Coordinator
from .handoff import restore_previous
from .phases import FLOWS, Kind, Outcome, Phase, ending
from .state import Activation

__all__ = ["boot", "retry_silent", "take_over"]

log = logging.getLogger("tenure.guardian")

HOT = frozenset({Kind.UPGRADE, Kind.ROLLBACK})
BEFORE_FENCE = frozenset({Phase.CREATED, Phase.CHECKED, Phase.ADMITTED, Phase.DRAINING,
                          Phase.CHECKPOINTED})


SILENT_WAIT_S = 15.0   # how long a start waits for a living backend that does not answer
SILENT_RETRY_S = 1.0   # the pause between two questions to it


async def boot(co: Coordinator) -> None:
    owner = await co.owner_call("status")
    owner_epoch = int(owner["epoch"])
    try:
        live = await _answering(co)
    except BackendUnavailable as exc:
        if not exc.data.get("silent"):
            raise
        # alive and silent (stopped, hung): never fenced off nor raced, and the
        # activations left open wait for a start that can ask it
        block(co, exc)
        co.write_diagnostics()
        return
    retired = None
    unfit = None if live is None else _unfit(co, live, owner_epoch)
    if live is not None and unfit is not None:
        retired = await _retire_fenced(co, live, unfit)   # it outlived its guardian
        live = None
    if live is not None:
        await _adopt(co, live)
    for act in co.state.open_activations():
        if co.state.activation(act.id).final:
            continue  # finished beside the handoff it restored
        try:
            await _finish(co, act, live, owner_epoch, owner.get("grant"))
        except Exception as exc:  # one activation's trouble must not stop the guardian
            log.exception("could not finish activation %s", act.id)
            co.end(co.state.activation(act.id), Phase.UNCERTAIN, GuardianFault.wrap(exc))
    if co.current is None and co.blocked is None and co.state.selector().current is not None:
        await recover_safely(co, before=retired)
    co.write_diagnostics()


async def retry_silent(co: Coordinator) -> None:
    """A start (or recovery) blocked beside a living backend that did not answer
    (``co.blocked['silent_pid']``, guardian.cold.block) is done again once that backend
    answers, or is gone: adopted, or recovered from the certificate, the activations a
    dead guardian left open finished either way. While it stays silent nothing changes;
    a command of the operator's that came first (`backend recover`, `release select`)
    has it. Was: only `tenure backend recover` ended such a block. Never raises: a
    failure is logged and marks the guardian unhealthy, as one of its start would."""
    blocked = co.blocked
    if co.current is not None or blocked is None or "silent_pid" not in blocked \
            or co.command_lock.locked():
        return
    try:
        await co.live_backend()
    except BackendUnavailable as exc:
        if exc.data.get("silent"):
            return   # still silent: asked again at the next probe
    async with co.command_lock:
        if co.blocked is not blocked or co.current is not None:
            return
        log.warning("the backend the recovery was blocked on (pid %s) answers again, or is "
                    "gone: starting again", blocked["silent_pid"])
        co.blocked = None
        try:
            await boot(co)
            if (co.unhealthy or {}).get("task") == "boot":
                co.unhealthy = None   # a start that failed before has been done now
        except Exception as exc:   # the guardian serves status and recover regardless
            log.exception("start again after a silent backend: %s", exc)
            co.unhealthy = {"task": "boot", "reason": str(exc), "at": time.time()}
            if co.current is None and co.blocked is None:
                co.blocked = blocked   # still blocked: asked again at the next probe
            co.write_diagnostics()


async def _answering(co: Coordinator) -> dict[str, Any] | None:
    """The status of the generation on api.sock, or None when none is there. A living
    one that does not answer (overloaded, stopped for a moment) is asked again every
    SILENT_RETRY_S for SILENT_WAIT_S: adopted once it answers, since recovering beside
    it would fence it off and the new generation could not bind its socket. Raises
    BackendUnavailable (``data.silent``) when it is still silent then, what
    live_backend raises otherwise."""
    end = co.clock() + SILENT_WAIT_S
    said = False
    while True:
        try:
            return await co.live_backend()
        except BackendUnavailable as exc:
            if not exc.data.get("silent") or co.clock() >= end:
                raise
            if not said:
                log.warning("%s; asking again for up to %g s before giving up",
                            exc.msg, SILENT_WAIT_S)
                said = True
        await co.sleep(SILENT_RETRY_S)


async def take_over(co: Coordinator, live: dict[str, Any]) -> bool:
    """Take over the generation that answers on api.sock (``live``: its status), found
    when no generation is in control: adopted (True) when it holds the owner's current
    epoch under the owner that runs, else retired (False; the caller starts a fresh
    one). Raises what asking the owner raises."""
    owner_epoch = int((await co.owner_call("status"))["epoch"])
    unfit = _unfit(co, live, owner_epoch)
    if unfit is not None:
        await _retire_fenced(co, live, unfit)
        return False
    await _adopt(co, live)
    co.blocked = co.recovery_failing = None
    log.warning("adopted backend generation %s (pid %d), which answers again",
                live["activation"], live["identity"]["pid"])
    co.write_diagnostics()
    return True


async def _adopt(co: Coordinator, live: dict[str, Any]) -> None:
    """Watch the generation ``live`` describes, never duplicated; resumed when a
    handoff that died left it draining."""
    co.watch(BackendProcess.attach(live["activation"], live["identity"]["pid"],
                                   live["identity"]["start_ticks"]))
    if live["draining"]:
        await co.control("generation.resume")
    await _select_adopted(co, live)


async def _select_adopted(co: Coordinator, live: dict[str, Any]) -> None:
    """With no release selected (a new state.db: the old one was set aside as damaged)
    beside a generation it adopts, the release that generation runs is the selected
    one, as the state.db it was started from said: recorded once it verifies, so that
    `tenure up` finds it selected rather than selecting another beside a running
    backend. One that does not verify is left unselected, and said."""
    sel, rid = co.state.selector(), live.get("release")
    if sel.current is not None or not isinstance(rid, str):
        return
    try:
        await asyncio.to_thread(co.release, rid)
    except TenureError as exc:
        log.error("no release is selected, and the release %s the adopted generation runs "
                  "does not verify (%s): install a release and `tenure backend upgrade "
                  "ID` to it (a select is refused beside a running backend)", rid, exc)
        return
    co.state.add_release(rid)
    co.state.select(rid, sel.revision)
    log.warning("no release was selected (a new state.db): selected %s, the release the "
                "adopted generation %s runs", rid, live["activation"])


def _unfit(co: Coordinator, live: dict[str, Any], owner_epoch: int) -> str | None:
    """Why the generation answering on api.sock must not be adopted, or None. It must
    hold the owner's current epoch and be attached to this very owner process: one
    fenced for an owner instance that is gone (its grant names that instance) can never
    act again, since the owner refuses its grant and it refuses another owner
    (OWNER_CHANGED); adopted, it would hold control with no applications, forever."""
    assert co.owner_identity is not None
    if live["epoch"] != owner_epoch:
        return f"it holds epoch {live['epoch']}, the owner is at epoch {owner_epoch}"
    theirs = live.get("owner") or {}
    if theirs != co.owner_identity.to_wire():
        return (f"it is attached to owner instance {theirs.get('instance')} (pid "
                f"{theirs.get('pid')}), not to the owner running now (instance "
                f"{co.owner_identity.instance}, pid {co.owner_identity.pid})")
    return None


async def _retire_fenced(co: Coordinator, live: dict[str, Any], why: str
                         ) -> dict[str, Any]:
    """Retire a generation that outlived its guardian and may not be adopted (``why``):
    asked to retire, then stopped by the pid and start time it answered with (the
    client checked both against the socket's peer); a process that is no longer that
    one is never signalled. Returns what the fresh generation's first receipt records
    about it."""
    pid, ticks = live["identity"]["pid"], live["identity"]["start_ticks"]
    log.warning("retiring generation %s (pid %d): %s; a fresh generation takes over",
                live["activation"], pid, why)
    bp = BackendProcess.attach(live["activation"], pid, ticks)
    bp.expected_exit = True
    try:
        await co.control("generation.retire", timeout=min(10.0, co.deadline))
    except TenureError:
        pass
    await bp.stop(term_after=min(10.0, co.deadline))
    return {"retired_at_start": {"activation": live["activation"], "pid": pid,
                                 "epoch": live["epoch"], "reason": why}}


def _holds(co: Coordinator, act: Activation, owner_epoch: int,
           grant: dict[str, Any] | None) -> bool:
    """Whether the owner holds this activation's recorded grant."""
    granted = co.state.grant_for(act.id)
    if granted is None or granted != owner_epoch:
        return False
    return grant is None or grant.get("activation") == act.id


async def _finish(co: Coordinator, act: Activation, live: dict[str, Any] | None,
                  owner_epoch: int, grant: dict[str, Any] | None) -> None:
    """Resolve one activation left open by a guardian that died."""
    log.warning("resuming activation %s left in phase %s", act.id, act.phase)
    held = _holds(co, act, owner_epoch, grant)
    if act.phase in BEFORE_FENCE:
        if not held:   # never fenced: whatever runs keeps control
            co.end(act, Phase.ABORTED, HandoffFailed("guardian restarted before the fence"))
            return
        act = co.advance(act, Phase.FENCED, {"note": "the owner holds this activation's "
                                             "grant: the fence landed"}, epoch=owner_epoch)
    elif not held:
        await _superseded(co, act, live, owner_epoch, grant)
        return
    if live is not None and live["activation"] == act.id:
        await _complete(co, act, adopt=True)
    elif live is not None:   # another generation holds the current epoch: leave it alone
        co.end(act, Phase.UNCERTAIN, Uncertain("another generation answers beside the "
                                               "one this activation started"))
    else:
        await _carry_forward(co, act)


async def _superseded(co: Coordinator, act: Activation, live: dict[str, Any] | None,
                      owner_epoch: int, grant: dict[str, Any] | None) -> None:
    """After the fence, but the owner holds a newer grant: a restore of this handoff
    was under way (finish it first and end as it ended), or the operator decides."""
    restorer = co.state.restorer_of(act.id)
    if restorer is not None and not restorer.final:
        await _finish(co, restorer, live, owner_epoch, grant)
        restorer = co.state.activation(restorer.id)
    if restorer is not None and restorer.phase is Phase.COMPLETE:
        co.end(act, Phase.ROLLED_BACK, HandoffFailed("the guardian died while restoring "
                                                     "the previous release; it finished"))
        return
    co.end(act, Phase.UNCERTAIN, Uncertain("the owner holds another grant than this "
                                           "activation's", {"owner_epoch": owner_epoch}))


async def _carry_forward(co: Coordinator, act: Activation) -> None:
    """Start (or restart) this activation's generation and complete it; a failure gets
    its phase's ending (a hot handoff restores the previous release)."""
    try:
        if act.kind in HOT and act.phase is Phase.FENCED:
            act = co.advance(act, Phase.RETIRED, {"note": "incumbent gone at guardian start"})
        if act.phase in (Phase.FENCED, Phase.RETIRED):
            assert act.epoch is not None
            has_cp = act.kind in HOT or act.kind is Kind.RESTORE
            path = co.paths.checkpoint_file(_checkpoint_of(co, act)) if has_cp else None
            bp = await co.launch(act, act.epoch, str(act.kind), checkpoint=path)
            act = co.advance(act, Phase.STARTED, backend_pid=bp.pid)
        await _complete(co, act, adopt=False)
    except Exception as exc:
        err = GuardianFault.wrap(exc)
        act = co.state.activation(act.id)
        end = ending(act.kind, act.phase)
        if end is Phase.ROLLED_BACK and not isinstance(err, Uncertain):
            await restore_previous(co, act, err)
        else:
            await co.stop_generations(None)
            co.end(act, Phase.UNCERTAIN if isinstance(err, Uncertain) else end, err)


def _checkpoint_of(co: Coordinator, act: Activation) -> str:
    """The activation whose checkpoint this one adopts: its own for a handoff; for a
    restore, the failed handoff's (named in the restore's first receipt)."""
    if act.kind is not Kind.RESTORE:
        return act.id
    source = co.state.restored_by(act.id)
    if source is None:
        raise Uncertain(f"restore {act.id}: the handoff it restores from is not on record")
    return source


async def _complete(co: Coordinator, act: Activation, adopt: bool) -> None:
    """verified → complete; the selector follows a completed activation."""
    assert act.epoch is not None
    if adopt and co.current is None:
        st = await co.control("generation.status")
        co.watch(BackendProcess.attach(act.id, st["identity"]["pid"],
                                       st["identity"]["start_ticks"]))
    if act.phase is Phase.STARTED:
        checkpoint = co.read_checkpoint(_checkpoint_of(co, act)) \
            if act.kind in HOT or act.kind is Kind.RESTORE else None
        detail = await co.verify_generation(act.epoch, checkpoint)
        act = co.advance(act, Phase.VERIFIED, detail)
    sel = co.state.selector()
    select = (act.release, sel.revision) if sel.current != act.release else None
    co.advance(act, Phase.COMPLETE, outcome=Outcome.SUCCESS, select=select)


assert all(Phase.FENCED in FLOWS[k].next for k in Kind)  # every kind passes the fence
