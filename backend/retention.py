"""Retention: a generation prunes what the ``[retention]`` counts allow, now and then.

backend.db: finished operations and unused plans (BackendStore.prune). owner.db: rows of
ended launches, through the owner's ``launches.prune`` (they hold app environments);
the launches that open job records name are protected, since a job's resumption reads
them as evidence. The guardian prunes its own activations (guardian/retention.py).
Nothing open is ever pruned. A failed round is logged and tried again next time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from protocol.errors import TenureError

if TYPE_CHECKING:
    from .generation import Generation

__all__ = ["EVERY", "FIRST", "prune_once", "retention_loop"]

log = logging.getLogger("tenure.backend")

FIRST = 30.0      # seconds after READY (a handoff's pause is long over)
EVERY = 600.0     # then every ten minutes


def _protected(gen: Generation) -> list[str]:
    """Launch keys open job records may still need to read from the owner."""
    if gen.api is None:
        return []
    from .jobs import machine as jm
    keep = (*jm.OPEN, jm.State.RECOVERY_REQUIRED)
    return sorted(r.job.launch_key for r in gen.api.jobs.records.values()
                  if r.job.launch_key is not None and r.job.state in keep)


async def prune_once(gen: Generation, missed: dict[str, str] | None = None,
                     ask_owner: bool = True) -> dict[str, Any]:
    """One round. Returns what was deleted, and puts in ``missed`` (when given) what
    could not be pruned and why (the owner's launches, the owner not answering: the
    command that asked for the round said `pruned 0 operations, 0 plans`, nothing of
    them). ``ask_owner`` False: the owner is not asked (it does not answer). Raises
    nothing but CancelledError."""
    policy = gen.config.retention
    out: dict[str, Any] = {}
    if gen.store is not None:   # its connection belongs to this thread; a round is short
        out.update(gen.store.prune(policy.operations, policy.plans))
    sup = gen.sup
    if ask_owner and gen.owner is not None and sup is not None and not sup.fenced and \
            sup.owner_capabilities.get("retention") == 1:
        try:
            r = await gen.owner.call("launches.prune", {
                "keep": policy.launches, "protect": _protected(gen)}, epoch=gen.epoch)
            out["launches"] = r["deleted"]
        except TenureError as exc:
            log.warning("retention: the owner did not prune launches: %s", exc)
            if missed is not None:
                missed["launches"] = f"{exc.code_str}: {exc.msg}"
    return out


async def retention_loop(gen: Generation) -> None:
    delay = FIRST
    while True:
        await asyncio.sleep(delay)
        delay = EVERY
        if gen.draining:
            continue
        try:
            done = await prune_once(gen)
        except Exception:   # a round that fails is logged; the next one tries again
            log.exception("retention round failed")
            continue
        if any(done.values()):
            log.info("retention pruned %s", done)
