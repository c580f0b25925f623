"""What a starting guardian does about the world it finds: a living backend is adopted
(never duplicated), an interrupted handoff is completed or rolled back from its row and
checkpoint, and otherwise the selected release starts — or recovery is blocked."""

from __future__ import annotations

import logging
import os
from typing import Any

from protocol.durable import read_json
from protocol.errors import HandoffFailed, TenureError

from .backendproc import BackendProcess, control
from .coordinator import Coordinator
from .handoff import rollback_to_previous
from .phases import Phase
from .state import Activation

__all__ = ["boot"]

log = logging.getLogger("tenure.guardian")

BEFORE_FENCE = frozenset({Phase.CREATED, Phase.CHECKED, Phase.ADMITTED, Phase.DRAINING,
                          Phase.CHECKPOINTED})


async def boot(co: Coordinator) -> None:
    owner_epoch = int((await co.owner_call("status"))["epoch"])
    live = await co.live_backend()
    if live is not None and live["epoch"] != owner_epoch:
        await _retire_fenced(co, live)   # a fenced incumbent outlived its guardian
        live = None
    if live is not None:
        co.watch(BackendProcess.attach(live["activation"], live["identity"]["pid"],
                                       live["identity"]["start_ticks"]))
        if live["draining"]:
            await control(co.paths.api_sock, "generation.resume")
    for act in co.state.open_activations():
        await _finish(co, act, live, owner_epoch)
    if co.current is None and co.state.selector().current is not None:
        await co.recover_safely()
    co.write_diagnostics()


async def _retire_fenced(co: Coordinator, live: dict[str, Any]) -> None:
    log.warning("retiring generation %s: it holds a stale epoch", live["activation"])
    bp = BackendProcess.attach(live["activation"], live["identity"]["pid"],
                               live["identity"]["start_ticks"])
    bp.expected_exit = True
    try:
        await control(co.paths.api_sock, "generation.retire")
    except TenureError:
        pass
    await bp.stop(term_after=10.0)


async def _finish(co: Coordinator, act: Activation, live: dict[str, Any] | None,
                  owner_epoch: int) -> None:
    """Resolve one activation left open by a guardian that died."""
    log.warning("resuming activation %s left in phase %s", act.id, act.phase)
    if act.phase in BEFORE_FENCE or act.epoch is None or act.epoch != owner_epoch:
        # never fenced (or superseded): whatever runs keeps control
        co._fail(act, Phase.ABORTED, HandoffFailed("guardian restarted before the fence"))
        return
    if live is not None and live["activation"] == act.id:
        await _verify_and_complete(co, act)
        return
    if live is not None:  # another generation holds the current epoch: leave it alone
        co._fail(act, Phase.ABORTED, HandoffFailed("another generation holds control"))
        return
    await _start_candidate(co, act)


async def _start_candidate(co: Coordinator, act: Activation) -> None:
    path = co.paths.checkpoint_file(act.id)
    checkpoint = read_json(path, "tenure-checkpoint") if os.path.exists(path) else None
    if act.phase is Phase.FENCED:
        act = co.advance(act, Phase.RETIRED, {"note": "incumbent gone at guardian start"})
    assert act.epoch is not None
    try:
        if act.phase is Phase.RETIRED:
            bp = await co.launch(act, act.epoch, str(act.kind),
                                 checkpoint=path if checkpoint else None)
            act = co.advance(act, Phase.STARTED, backend_pid=bp.pid)
        await _verify_and_complete(co, act, checkpoint)
    except TenureError as exc:
        if checkpoint is None:
            co._fail(act, Phase.UNCERTAIN, exc)
        else:
            await rollback_to_previous(co, co.state.activation(act.id), path, checkpoint, exc)


async def _verify_and_complete(co: Coordinator, act: Activation,
                               checkpoint: dict[str, Any] | None = None) -> None:
    assert act.epoch is not None
    if co.current is None:
        st = await control(co.paths.api_sock, "generation.status")
        co.watch(BackendProcess.attach(act.id, st["identity"]["pid"],
                                       st["identity"]["start_ticks"]))
    if checkpoint is None:
        path = co.paths.checkpoint_file(act.id)
        checkpoint = read_json(path, "tenure-checkpoint") if os.path.exists(path) else None
    if act.phase is Phase.STARTED:
        detail = await co.verify_generation(act.epoch, checkpoint)
        act = co.advance(act, Phase.VERIFIED, detail)
    sel = co.state.selector()
    select = (act.release, sel.revision) if sel.current != act.release else None
    co.advance(act, Phase.COMPLETE, outcome="success", select=select)
