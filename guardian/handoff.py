"""Hot handoff: move control from the incumbent generation to a candidate release while
every application keeps running.

checked → admitted → draining → checkpointed → fenced → retired → started → verified →
complete. A failure before retirement resumes the incumbent (``aborted``); after it, the
candidate is stopped and the previous release is started under a fresh epoch from the
same checkpoint (``rolled_back``); when identity or inventory cannot be proven nothing
else is tried (``uncertain``) and the operator reconciles.
"""

from __future__ import annotations

import logging
from typing import Any

from protocol.durable import read_json
from protocol.errors import (
    BackendUnavailable,
    CapabilityMissing,
    HandoffFailed,
    IdentityError,
    TenureError,
    Uncertain,
)

from .backendproc import BackendProcess, control, preflight
from .coordinator import Coordinator
from .phases import Kind, Phase
from .state import Activation

__all__ = ["abort_requested_error", "upgrade"]

log = logging.getLogger("tenure.guardian")

DRAIN_TIMEOUT = 30.0
_BEFORE_RETIRE = frozenset({Phase.CREATED, Phase.CHECKED, Phase.ADMITTED, Phase.DRAINING,
                           Phase.CHECKPOINTED, Phase.FENCED})


class _Abort(TenureError):
    pass


def abort_requested_error() -> HandoffFailed:
    return HandoffFailed("aborted by the operator before retirement")


async def upgrade(co: Coordinator, release_id: str, check_only: bool = False,
                  kind: Kind = Kind.UPGRADE) -> dict[str, Any]:
    """Run one handoff to ``release_id``. Returns the final activation and receipts."""
    sel = co.state.selector()
    incumbent = co.current
    co.abort_requested = False  # an abort applies only to the handoff it was sent for
    act = co.state.create_activation(kind, release_id, sel.current, None)
    try:
        act = await _check(co, act)
        if check_only:
            act = co.advance(act, Phase.COMPLETE, outcome="check-only")
            return _result(co, act)
        if incumbent is None or not incumbent.alive():
            raise BackendUnavailable("no backend generation is running to hand over from; "
                                     "use `tenure backend recover`")
        standby = await _standby(co, act)
        try:
            act = await _before_retire(co, act, incumbent)
            act = await _after_retire(co, act, incumbent, sel.revision, standby)
        finally:
            if standby is not None and co.current is not standby:
                await standby.stop(kill_after=2.0)
    except TenureError as exc:
        log.error("handoff %s failed in phase %s: %s", act.id, co.state.activation(act.id)
                  .phase, exc)
        act = co.state.activation(act.id)
        if not act.final:
            act = co._fail(act, Phase.ABORTED if act.phase in _BEFORE_RETIRE
                           else Phase.UNCERTAIN, exc)
    finally:
        co.abort_requested = False
    co.prune()
    return _result(co, act)


async def _standby(co: Coordinator, act: Activation) -> BackendProcess | None:
    """Start the candidate's interpreter now, outside the pause; it holds nothing. A
    release that cannot stand by (an older one) is started the plain way later."""
    try:
        return await BackendProcess.standby(co.release(act.release), co.paths.home,
                                            co.paths.logs)
    except (TenureError, TimeoutError) as exc:
        log.warning("candidate cannot stand by (%s); it will start cold", exc)
        return None


async def _check(co: Coordinator, act: Activation) -> Activation:
    release = co.release(act.release)                       # hashes, interpreter
    caps = (await co.owner_call("status"))["capabilities"]
    missing = {k: v for k, v in release.contracts.items() if caps.get(k) != v}
    if missing:
        raise CapabilityMissing(f"the owner lacks {missing} that the candidate requires",
                                {"missing": missing})
    report = await preflight(release)
    return co.advance(act, Phase.CHECKED, {"preflight": report})


async def _before_retire(co: Coordinator, act: Activation, incumbent: BackendProcess
                         ) -> Activation:
    """admitted → draining → checkpointed → fenced; on failure resume the incumbent."""
    st = await control(co.paths.api_sock, "generation.status")
    from_epoch = int(st["epoch"])
    act = co.advance(act, Phase.ADMITTED, from_epoch=from_epoch)
    try:
        _abort_point(co)
        drained = await control(co.paths.api_sock, "generation.drain",
                                {"timeout": DRAIN_TIMEOUT}, timeout=DRAIN_TIMEOUT + 5)
        if not drained["drained"]:
            raise HandoffFailed("the incumbent did not drain in time", drained)
        act = co.advance(act, Phase.DRAINING, drained)
        _abort_point(co)
        path = co.paths.checkpoint_file(act.id)
        cp = await control(co.paths.api_sock, "generation.checkpoint", {"path": path})
        act = co.advance(act, Phase.CHECKPOINTED, {"inventory_digest": cp["inventory_digest"],
                                                   "launches": cp["launches"]})
        _abort_point(co)
    except TenureError:
        await _resume_incumbent(co)
        raise
    try:
        epoch = await co.fence(act)
    except TenureError:
        # The answer may be lost after the owner accepted: ask it which epoch it holds.
        epoch = co.state.last_epoch()
        if (await co.owner_call("status"))["epoch"] != epoch:
            await _resume_incumbent(co)
            raise
    return co.advance(act, Phase.FENCED, epoch=epoch)


def _abort_point(co: Coordinator) -> None:
    if co.abort_requested:
        co.abort_requested = False
        raise abort_requested_error()


async def _resume_incumbent(co: Coordinator) -> None:
    try:
        await control(co.paths.api_sock, "generation.resume")
    except TenureError as exc:
        log.error("could not resume the incumbent: %s", exc)


async def _after_retire(co: Coordinator, act: Activation, incumbent: BackendProcess,
                        revision: int, standby: BackendProcess | None = None) -> Activation:
    """retired → started → verified → complete; on failure roll back. The incumbent is
    fenced already: whatever it answers, it is made to exit (SIGKILL at the end)."""
    incumbent.expected_exit = True
    try:
        await control(co.paths.api_sock, "generation.retire", timeout=10.0)
    except TenureError as exc:
        log.warning("the incumbent did not take the retire request (%s); stopping it", exc)
    await incumbent.stop(term_after=10.0)
    act = co.advance(act, Phase.RETIRED, {"pid": incumbent.pid,
                                          "returncode": incumbent.returncode})
    path = co.paths.checkpoint_file(act.id)
    epoch = act.epoch
    assert epoch is not None
    checkpoint: dict[str, Any] | None = None
    try:
        checkpoint = read_json(path, "tenure-checkpoint")
        bp = await co.launch(act, epoch, str(act.kind), checkpoint=path, standby=standby)
        act = co.advance(act, Phase.STARTED, backend_pid=bp.pid)
        detail = await co.verify_generation(epoch, checkpoint)
        act = co.advance(act, Phase.VERIFIED, detail)
        return co.advance(act, Phase.COMPLETE, outcome="success",
                          select=(act.release, revision))
    except TenureError as exc:
        if checkpoint is None:
            return co._fail(co.state.activation(act.id), Phase.UNCERTAIN, exc)
        return await rollback_to_previous(co, act, path, checkpoint, exc)


async def rollback_to_previous(co: Coordinator, act: Activation, path: str,
                               checkpoint: dict[str, Any], cause: TenureError) -> Activation:
    """Stop the candidate; start the previous release under a fresh epoch from the same
    checkpoint. Unprovable identity or inventory ends ``uncertain``."""
    log.error("candidate failed after retirement (%s); rolling back", cause)
    act = co.state.activation(act.id)
    if co.current is not None and co.current.activation == act.id:
        await co.current.stop(kill_after=5.0)
        co.current = None
    if isinstance(cause, IdentityError | Uncertain) or act.from_release is None:
        return co._fail(act, Phase.UNCERTAIN, cause)
    previous = co.state.create_activation(Kind.ROLLBACK, act.from_release, act.release, None)
    try:
        epoch = await co.fence(previous)
        previous = co.advance(previous, Phase.FENCED, epoch=epoch)
        bp = await co.launch(previous, epoch, "rollback", checkpoint=path)
        previous = co.advance(previous, Phase.STARTED, backend_pid=bp.pid)
        await co.verify_generation(epoch, checkpoint)
        previous = co.advance(previous, Phase.VERIFIED)
        co.advance(previous, Phase.COMPLETE, outcome="success")
    except TenureError as exc:
        co._fail(previous, Phase.UNCERTAIN, exc)
        return co._fail(co.state.activation(act.id), Phase.UNCERTAIN, exc)
    return co._fail(co.state.activation(act.id), Phase.ROLLED_BACK, cause)


def _result(co: Coordinator, act: Activation) -> dict[str, Any]:
    return {"activation": act.to_wire(), "receipts": co.state.receipts(act.id)}
