"""What a backend generation writes while it runs: the apps' state every round, then
an acknowledgement of the observations it reflects (``persist_round``), and the
recovery certificate, written when the generation is quiet and its view equals the
owner's live inventory (``publish_certificate``). backend.generation starts the loops.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from protocol.certificate import sound_body
from protocol.digest import inventory_digest
from protocol.errors import StaleEpoch, TenureError
from protocol.schema import is_count

if TYPE_CHECKING:
    from .generation import Generation

__all__ = ["CURSOR_SLACK", "certificate_loop", "persist", "persist_loop", "persist_round",
           "publish_certificate", "same_snapshot"]

log = logging.getLogger("tenure.backend")

CERTIFICATE_PERIOD = 5.0
FIRST_CERTIFICATE = 0.5
CURSOR_SLACK = 2_048  # half the owner's observation ring (owner.observations.RING_SIZE)


async def persist_loop(gen: Generation) -> None:
    while True:
        await asyncio.sleep(0.5)
        await persist_round(gen)


async def persist_round(gen: Generation) -> None:
    """Save dirty instances, then acknowledge the observations processed so far.

    A save that fails (a full disk) keeps them dirty for the next round, and nothing
    is acknowledged meanwhile: the owner keeps every observation the saved state does
    not reflect yet. A run of failures is logged when it begins and when it ends."""
    try:
        persist(gen)
    except sqlite3.Error as exc:
        if not gen.save_failing:
            log.error("could not save the apps' state (%s); it stays in memory, is "
                      "saved again every 0.5 s, and observations are not acknowledged "
                      "to the owner until a save works", exc)
        gen.save_failing = True
        return
    if gen.save_failing:
        log.warning("the apps' state is saved again")
        gen.save_failing = False
    sup, owner = gen.sup, gen.owner
    if owner is not None and sup is not None and not sup.fenced \
            and not gen.draining and gen.cursor > gen.acked:
        try:
            await owner.call("observations.ack", {"cursor": gen.cursor},
                             epoch=gen.epoch)
            gen.acked = gen.cursor
        except StaleEpoch as exc:
            sup.fence(f"the owner refused an acknowledgement: {exc.msg}")
        except TenureError as exc:
            log.warning("observation ack failed: %s", exc)


def persist(gen: Generation) -> None:
    """Write buffered events and dirty instances, in one commit: an exit told is durable
    with the state it moved its instance to, so a generation that recovers after a crash
    neither tells it again nor misses it (it replays what the saved state does not
    reflect). Raises sqlite3.Error when the instances cannot be saved (they stay dirty,
    and the events buffered); events that cannot be written stay buffered (logged when
    that begins and ends) and the instances are saved without them. A fenced generation
    saves no instance: backend.db's instances are the newer generation's now (its
    events, tagged with its activation, are still appended)."""
    store, sup = gen.store, gen.sup
    if store is None:   # not open yet: no events either (they are written there)
        return
    if not (gen.events is not None and gen.events.pending()) and \
            not (sup is not None and (sup.dirty - sup.deferred or sup.removed)):
        return          # nothing to write: no transaction every round
    written, failed = 0, False
    try:
        with store.tx() as db:   # one commit; each part below is a savepoint of it
            written, failed = _write_events(gen)
            if not db.in_transaction:   # SQLite ended it (a full disk rolls it all back):
                raise sqlite3.OperationalError(   # the states are not saved without it
                    "the transaction was rolled back while writing the event log")
            saved = _save_instances(gen)
    except sqlite3.Error:
        gen.events_failing = gen.events_failing or failed   # said once, as it began
        raise
    _commit_events(gen, written, failed)
    if saved:
        assert sup is not None
        sup.dirty &= sup.deferred
        sup.removed.clear()


def _write_events(gen: Generation) -> tuple[int, bool]:
    """(events inserted, whether inserting them failed). Raises nothing."""
    if gen.events is None:
        return 0, False
    try:
        return gen.events.write(), False
    except sqlite3.Error as exc:   # kept buffered: the next round tries again
        if not gen.events_failing:
            log.error("could not write the event log (%s); events stay buffered "
                      "until a write works", exc)
        return 0, True


def _commit_events(gen: Generation, written: int, failed: bool) -> None:
    """After the commit: forget the events it made durable, and say when writing them
    works again."""
    if gen.events is None:
        return
    gen.events.written(written)
    if not failed and gen.events_failing:
        log.warning("the event log is written again")
    gen.events_failing = failed


def _save_instances(gen: Generation) -> bool:
    """Save the dirty instances (and forget the removed ones) inside the open
    transaction; whether there were any to save. Raises sqlite3.Error; a newer
    generation that claimed the state fences this one (nothing saved)."""
    sup, store = gen.sup, gen.store
    if sup is None or store is None or sup.fenced \
            or not (sup.dirty - sup.deferred or sup.removed):
        return False
    # a deferred instance is saved once decided: until then backend.db keeps it as it
    # was, and a generation recovered meanwhile decides it again
    wires = {k: sup.instances[k].to_wire() for k in sup.dirty - sup.deferred
             if k in sup.instances}
    try:
        store.save_instances(wires, sup.removed)
    except StaleEpoch as exc:   # a newer generation claimed the state: it is theirs
        sup.fence(exc.msg)
        return False
    return True


async def certificate_loop(gen: Generation,
                           sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Certify every CERTIFICATE_PERIOD; every FIRST_CERTIFICATE until this generation has
    certified once. Until then the certificate on disk is a predecessor's, under
    another grant (and after an upgrade of another release), which recovery refuses:
    a crash of a new generation would be blocked for as long as it waits."""
    while True:
        await sleep(FIRST_CERTIFICATE if gen.certified_at is None else CERTIFICATE_PERIOD)
        try:
            vouches = await publish_certificate(gen)
        except TenureError as exc:
            log.warning("no recovery certificate this round: %s", exc)
            continue
        except (sqlite3.Error, OSError) as exc:   # storage: the next round tries again
            # said by `status` and `backend status` (gen.certificate_error) until then
            if gen.certificate_error is None:
                log.error("could not write the recovery certificate (%s); tried again "
                          "every round, the last one written stays on disk", exc)
                gen.certificate_error = {"error": _storage_error(exc), "since": time.time()}
            continue
        # only a certificate that vouches ends the failure: a round with nothing written
        # (not quiet, as stops and launches retried on a full disk keep it) proves no
        # write works again
        if vouches and gen.certificate_error is not None:
            log.warning("the recovery certificate is written again")
            gen.certificate_error = None


def _storage_error(exc: sqlite3.Error | OSError) -> str:
    """What the storage said, for an operator: the OS's words, or SQLite's."""
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc) or type(exc).__name__


async def publish_certificate(gen: Generation) -> bool:
    """Make a valid certificate vouch for the current state, when quiet and our view
    equals the owner's live inventory. Returns whether one vouches now. A snapshot
    equal to the stored one is not written again (see :func:`same_snapshot`)."""
    sup, owner, rec = gen.sup, gen.owner, gen.recovery
    if sup is None or owner is None or rec is None or not _quiet(gen):
        return False
    seen = gen.mutations
    answer = await owner.call("inventory")
    epoch = answer.get("epoch")
    if isinstance(epoch, int) and epoch > gen.epoch:
        # a newer generation holds the owner: this one must not overwrite its
        # certificate with a world it no longer controls
        sup.fence(f"the owner holds epoch {epoch}, this generation {gen.epoch}")
        return False
    live = answer["launches"]
    if seen != gen.mutations or not _quiet(gen):
        return False  # something changed while the owner answered: next round
    if inventory_digest(live) != inventory_digest(sup.inventory()):
        return False
    body = {"activation": gen.activation, "epoch": gen.epoch,
            "release": gen.handoff.get("release"),
            "owner": gen.owner_identity.to_wire() if gen.owner_identity else None,
            "inventory_digest": inventory_digest(live), "launches": len(live),
            "cursor": gen.cursor, "config_revision": gen.config.revision,
            "at": time.time()}
    same = same_snapshot(rec.read(), body)
    try:
        persist(gen)
    except (sqlite3.Error, OSError):
        # the apps' state could not be saved (persist_loop says so, and tries again);
        # a certificate that already vouches for this very world still does: only a
        # new one that cannot be written is a certificate failure
        if not same:
            raise
    else:
        if not same:
            rec.publish(body)
            gen.certificate_writes += 1
    gen.certified_at = time.time()
    return True


def _quiet(gen: Generation) -> bool:
    """No step, no owner call, no instance mid-transition, not draining or fenced."""
    sup = gen.sup
    return sup is not None and not gen.draining and not sup.fenced and sup.quiet() \
        and not (gen.api is not None and gen.api.busy())


def same_snapshot(stored: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether the stored certificate already vouches for ``body``: valid, a body recovery
    can use (protocol.certificate.sound_body, with its ``at`` and ``cursor``), and equal
    to it but for the time and an observation cursor less than CURSOR_SLACK behind.

    Every change invalidates first, so the stored ``at`` stays true: it is when this
    snapshot was first certified, and nothing reads it but people (recovery compares
    the inventory digest and the owner). Writing it again every round would cost a
    synchronous write for nothing. The cursor alone moves while nothing changes (notify
    messages such as WATCHDOG=1); an older certified cursor only makes a recovering
    generation replay those messages, and the slack keeps it inside the owner's ring."""
    old = stored.get("body")
    if not stored.get("valid") or not isinstance(old, dict) or not sound_body(old) \
            or "at" not in old:
        return False   # one recovery cannot use (or we never wrote): replaced
    moving = ("at", "cursor")
    if {k: v for k, v in old.items() if k not in moving} != \
            {k: v for k, v in body.items() if k not in moving}:
        return False
    cursor = old.get("cursor")
    return is_count(cursor) and 0 <= body["cursor"] - cursor < CURSOR_SLACK
