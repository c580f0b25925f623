"""`tenure guardian upgrade`: move the guardian itself to another release, leaving the
applications and the running backend generation alone.

The checks come first and change nothing: no activation may be unfinished (its
guardian must finish it), the backend generation in control must answer (the new
guardian takes it over by asking it: one that is stopped or hung would leave no guardian
at all), the release must verify, and its guardian must pass its preflight (it imports,
reads state.db and the record, and names the owner contracts it needs, which the owner
must offer). Then the record becomes a trial of the release and
the guardian stops serving and execs into it (guardian.start): same pid, same lock, the
backend stays its child and is adopted by the new guardian's boot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from protocol.errors import (
    CapabilityMissing,
    GuardianUpgradeFailed,
    OperationInProgress,
    PreflightFailed,
    PreflightTimeout,
    TenureError,
)
from protocol.procfs import silence

from . import own
from .backendproc import preflight
from .coordinator import Coordinator

__all__ = ["upgrade_guardian"]


async def upgrade_guardian(co: Coordinator, release_id: str, check: bool,
                           stop: Callable[[], None]) -> dict[str, Any]:
    """The plan (``check``, or the release already runs), or the plan after the move was
    recorded and the guardian told to stop for it. Raises OperationInProgress (an
    unfinished activation, an unconfirmed move), what verification raises,
    CapabilityMissing, GuardianUpgradeFailed (the preflight)."""
    mine = co.own
    assert mine is not None
    own.step(mine.record, own.Event.UPGRADE, release_id)   # refuses during a trial (pure)
    _refuse_unfinished(co)
    await _backend_answers(co)
    rel = await asyncio.to_thread(co.release, release_id)
    report = await _preflight(co, rel, release_id)
    plan = {"release": release_id, "from": mine.release, "guardian": co.identity.to_wire(),
            "backend": co.current.to_wire() if co.current is not None else None,
            "preflight": {"elapsed": report.get("elapsed"),
                          "python": report["report"].get("python"),
                          "import_s": report["report"].get("import_s")},
            "changed": release_id != mine.release, "restarting": False}
    if check or not plan["changed"]:
        return plan
    mine.upgrade(co.paths, release_id)
    co.reexec = release_id
    asyncio.get_running_loop().call_soon(stop)
    return {**plan, "restarting": True}


def _refuse_unfinished(co: Coordinator) -> None:
    unfinished = co.state.open_activations()
    if unfinished:
        act = unfinished[0]
        raise OperationInProgress(
            f"activation {act.id} ({act.kind}, phase {act.phase}) is unfinished; the "
            "guardian that runs it must finish it first (see `tenure backend status`)",
            {"activation": act.id, "kind": str(act.kind), "phase": str(act.phase)})


BACKEND_CHECK_S = 5.0   # as long as the new guardian's boot waits for its answer


async def _backend_answers(co: Coordinator) -> None:
    """Raises GuardianUpgradeFailed (``step: backend``) when a generation is in control
    and does not answer within BACKEND_CHECK_S, saying what /proc shows of it."""
    if co.current is None:
        return
    try:
        await co.control("generation.status", timeout=min(BACKEND_CHECK_S, co.deadline))
    except TenureError as exc:
        pid = co.current.pid
        raise GuardianUpgradeFailed(
            f"the backend generation (pid {pid}) does not answer ({exc.code_str}): a new "
            f"guardian could not take it over. {silence(pid)}. Nothing was changed",
            {"step": "backend", "backend_pid": pid}) from None


async def _preflight(co: Coordinator, rel: Any, release_id: str) -> dict[str, Any]:
    try:
        report = await preflight(rel, co.deadline, module="guardian",
                                 args=("--home", str(co.paths.home)))
    except (PreflightFailed, PreflightTimeout) as exc:
        raise GuardianUpgradeFailed(
            f"the guardian of release {release_id} failed its preflight: {exc.msg}",
            {**exc.data, "release": release_id, "step": "preflight"}) from None
    wanted = report["report"].get("owner_contracts") or {}
    caps = (await co.owner_status())["capabilities"]
    missing = {k: v for k, v in wanted.items() if caps.get(k) != v}
    if missing:
        raise CapabilityMissing(f"the owner lacks {missing} that the guardian of release "
                                f"{release_id} requires", {"missing": missing})
    return report
