"""Retention: a generation prunes what the ``[retention]`` counts allow, now and then.

backend.db: finished operations and unused plans (BackendStore.prune). owner.db: rows of
ended launches, through the owner's ``launches.prune`` (they hold app environments);
the launches that open job records name are protected, since a job's resumption reads
them as evidence. The journal: the lines of apps the config no longer has, once their
newest line is ``removed_app_logs_days`` old (``logs.apps``, ``logs.forget_apps``; a job
template's output, app ``job:NAME``, goes with its records instead: backend.jobs).
The guardian prunes its own activations (guardian/retention.py). Nothing open is ever
pruned. A failed round is logged and tried again next time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from protocol.errors import Conflict, TenureError

if TYPE_CHECKING:
    from .generation import Generation

__all__ = ["EVERY", "FIRST", "prune_once", "retention_loop"]

log = logging.getLogger("tenure.backend")

FIRST = 30.0      # seconds after READY (a handoff's pause is long over)
EVERY = 600.0     # then every ten minutes
FORGET_TIMEOUT = 600.0   # one app's lines: its budget deleted in one owner transaction
FORGET_BUDGET_S = 60.0   # a round starts no more forgetting after this; the next goes on


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
    if not ask_owner or gen.owner is None or sup is None or sup.fenced:
        return out
    owner = gen.owner

    async def launches() -> dict[str, Any]:
        r = await owner.call("launches.prune", {
            "keep": policy.launches, "protect": _protected(gen)}, epoch=gen.epoch)
        return {"launches": r["deleted"]}
    for what, cap, doing, work in (
            ("launches", "retention", "prune launches", launches),
            ("log_apps", "logApps", "forget removed apps' lines",
             lambda: _forget_removed_apps(gen))):
        if sup.owner_capabilities.get(cap) != 1:   # an older owner cannot
            continue
        try:
            out.update(await work())
        except TenureError as exc:
            log.warning("retention: the owner did not %s: %s", doing, exc)
            if missed is not None:
                missed[what] = f"{exc.code_str}: {exc.msg}"
    return out


async def _forget_removed_apps(gen: Generation) -> dict[str, int]:
    """Forget the journal lines of each app the applied config no longer has whose
    newest line is ``removed_app_logs_days`` old: ``{log_apps, log_lines}`` went, and
    ``log_apps_left`` when the round's FORGET_BUDGET_S ran out first (the next round
    goes on). Nothing while no config is applied (none yet, or backend.db set aside):
    every app would look removed. An app that still has a process (its stop failed)
    is left for a later round, and one an apply put back while the round ran is kept
    (the config is read again before each app's call; an admitted config is the
    applied one at once, backend.operations). Raises TenureError (the owner's)."""
    assert gen.owner is not None and gen.store is not None
    if gen.store.config() is None:
        return {"log_apps": 0, "log_lines": 0}
    before = time.time() - 86_400 * gen.config.retention.removed_app_logs_days
    due = [{"stack": a["stack"], "app": a["app"]} for a in await _journal_apps(gen)
           if ":" not in a["app"] and gen.config.app(a["stack"], a["app"]) is None
           and (a["last_at"] is None or a["last_at"] <= before)]
    out = {"log_apps": 0, "log_lines": 0}
    until = time.monotonic() + FORGET_BUDGET_S
    for i, app in enumerate(due):
        if time.monotonic() >= until:
            out["log_apps_left"] = len(due) - i
            break
        if gen.config.app(app["stack"], app["app"]) is not None:
            continue   # an apply put it back since the list was read: its lines stay
        n = await _forget(gen, app)
        if n is not None:
            out["log_apps"] += 1
            out["log_lines"] += n
    if out["log_apps"]:
        log.info("retention: forgot the journal lines of %d removed apps (%d lines)",
                 out["log_apps"], out["log_lines"])
    return out


async def _journal_apps(gen: Generation) -> list[dict[str, Any]]:
    """Every app with lines in the journal (``logs.apps``, page after page)."""
    assert gen.owner is not None
    out: list[dict[str, Any]] = []
    after: dict[str, str] = {}
    while True:
        page = await gen.owner.call("logs.apps", after)
        out += page["apps"]
        if not page.get("more") or not page["apps"]:
            return out
        last = page["apps"][-1]
        after = {"after_stack": last["stack"], "after_app": last["app"]}


async def _forget(gen: Generation, app: dict[str, str]) -> int | None:
    """``logs.forget_apps`` of one app (the owner deletes up to the app's budget, in
    steps: a second or so for 64 MiB, longer for a larger one, hence the long wait);
    the lines deleted, or None when the owner refused because the app has a process
    again or still."""
    assert gen.owner is not None
    try:
        r = await gen.owner.call("logs.forget_apps", {"apps": [app]}, epoch=gen.epoch,
                                 timeout=FORGET_TIMEOUT)
    except Conflict:
        log.info("retention: %s/%s has a process again or still: its journal lines stay "
                 "for now", app["stack"], app["app"])
        return None
    return int(r["deleted"])


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
