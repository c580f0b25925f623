"""Adoption: how a new backend generation takes over the instances that already run.

From a checkpoint (hot handoff): every instance is restored exactly from the incumbent's
snapshot and each process it names must be live in the owner with the same pid and start
ticks; one that died during the handoff is reported and fed its exit, anything else that
does not match is refused (the guardian then rolls back or stops as ``uncertain``).

Without a checkpoint (first start, crash recovery): the owner's live inventory is the
truth. Instances saved in backend.db supply restart and exit counters and backoff
state, and the launches made after an instance was last saved are counted from the
owner's record of them (restarts at once, their exits by record_unsaved_exits); a live
launch is adopted, never relaunched; a saved running instance whose process is gone is
fed its exit so its restart policy applies.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from msgspec import Struct, field

from protocol.errors import BadRequest, IdentityMismatch

from . import instance as im
from .after_stop import DOWN, Wait, WaitKind, after_stop_bound
from .events import moment
from .instance_types import EXIT_REASON, ExitReason
from .model import App, Config, ReadyKind
from .store import BackendStore
from .supervisor import Supervisor, instance_key

__all__ = ["Adoption", "adopt_checkpoint", "adopt_inventory", "defer_backoffs", "missed_exits",
           "owner_replaced", "record_lost_exits", "record_unsaved_exits", "relaunch_lost",
           "resume_wanted_starts"]

log = logging.getLogger("tenure.backend")


class Adoption(Struct):
    adopted: list[dict[str, Any]] = field(default_factory=list)  # inventory as adopted
    missing: list[str] = field(default_factory=list)   # launch keys gone during the handoff
    orphans: list[str] = field(default_factory=list)   # live launches no instance claims
    # instance key -> launch keys made after its saved record, before the one adopted:
    # their exits are not in its saved counts (record_unsaved_exits); not on the wire
    unsaved: dict[str, list[str]] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {"adopted": self.adopted, "missing": self.missing, "orphans": self.orphans}


_HAS_PROCESS = frozenset({im.State.RUNNING, im.State.READY, im.State.STOPPING,
                          im.State.RESTARTING})
_BUSY = frozenset({im.State.RUNNING, im.State.READY, im.State.STOPPING, im.State.RESTARTING})
MAX_UNSAVED = 100   # launches per instance whose exits a recovery asks the owner about


def _live(owner_inventory: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["launch_key"]: r for r in owner_inventory}


def adopt_checkpoint(sup: Supervisor, config: Config, checkpoint: dict[str, Any],
                     owner_inventory: list[dict[str, Any]], now: float) -> Adoption:
    """Restore every instance of the checkpoint. Raises IdentityMismatch when a process
    the checkpoint names is live under another identity, BadRequest for a bad snapshot."""
    live = _live(owner_inventory)
    result = Adoption()
    for wire in checkpoint["instances"]:
        app = config.app(wire.get("stack", ""), wire.get("app", ""))
        if app is None:
            raise BadRequest(f"checkpoint names {wire.get('stack')}/{wire.get('app')}, "
                             "which the applied config does not have")
        inst = im.Instance.from_wire(wire, app)
        key = instance_key(app.stack, app.name, inst.index)
        sup.instances[key] = inst
        sup.by_launch[inst.launch_key] = key
        if inst.pid is None:
            continue
        row = live.get(inst.launch_key)
        if row is None:
            result.missing.append(inst.launch_key)
        elif row["pid"] != inst.pid or row["start_ticks"] != inst.start_ticks:
            raise IdentityMismatch(f"{inst.launch_key}: the owner runs pid {row['pid']}, the "
                                   f"checkpoint says {inst.pid}", {"launch_key": inst.launch_key})
    result.adopted = sup.inventory()
    result.orphans = sorted(set(live) - set(sup.by_launch))
    _told_status(sup, live)
    # still waiting for the queued config the incumbent had not decided (its spool, or
    # the operation resumed here, decides them)
    sup.deferred = {k for k in checkpoint.get("deferred", [])
                    if k in sup.instances and sup.instances[k].state is im.State.STOPPED}
    _resume(sup, result, now)
    return result


def adopt_inventory(sup: Supervisor, config: Config, saved: dict[str, dict[str, Any]],
                    owner_inventory: list[dict[str, Any]], now: float) -> Adoption:
    """Build instances from backend.db snapshots and the owner's live launches."""
    live = _live(owner_inventory)
    result = Adoption()
    running = {instance_key(r["stack"], r["app"], r["instance"]) for r in live.values()}
    for key, wire in saved.items():
        app = config.app(wire.get("stack", ""), wire.get("app", ""))
        if app is None or not _configured(wire, app.instances):
            _retire(sup, key, wire, running)
            continue
        try:
            inst = im.Instance.from_wire(wire, app)
        except BadRequest as exc:
            log.warning("ignoring unreadable saved instance %s: %s", key, exc)
            continue
        sup.instances[key] = inst
        sup.by_launch[inst.launch_key] = key
    for lk, row in sorted(live.items()):
        key = instance_key(row["stack"], row["app"], row["instance"])
        old = sup.instances.get(key)
        app = config.app(row["stack"], row["app"])
        if app is None or (old is not None and old.launch_key == lk and old.pid is not None):
            continue
        restarts = 0 if old is None else old.restarts + _restarts_since(old, row["generation"])
        if old is not None and (passed := _launches_since(old, row["generation"])):
            result.unsaved[key] = passed
        inst = old if old is not None and old.state not in _BUSY else im.Instance(
            app, row["instance"])
        if old is not None and inst is not old:
            inst.exits = dict(old.exits)
        sup.instances[key] = inst
        # adopting starts nothing; _resume below re-arms probes
        inst.handle(im.Adopt(row["pid"], row["start_ticks"], _told_ready(app, row),
                             row["generation"], restarts, _age(row)), now)
        sup.by_launch[lk] = key
        sup.dirty.add(key)
    result.adopted = sup.inventory()
    result.orphans = sorted(set(live) - set(sup.by_launch))
    _told_status(sup, live)
    for inst in sup.instances.values():
        if inst.pid is not None and inst.launch_key not in live:
            result.missing.append(inst.launch_key)
    _resume(sup, result, now)
    return result


def _told_ready(app: App, row: dict[str, Any]) -> bool:
    """Whether the owner says the process of its live launch ``row`` sent READY=1, for
    an app whose readiness is that: adopted without a saved state (backend.db lost or
    damaged), it is ready, not held to a new ready timeout it can never meet (it said
    READY once). An owner restarted since, or one that predates saying it: False, and
    the timeout applies as before."""
    return app.ready.kind is ReadyKind.NOTIFY and row.get("ready_notified") is True


def _told_status(sup: Supervisor, live: dict[str, dict[str, Any]]) -> None:
    """The last ``STATUS=`` each adopted launch's app sent, as the owner's inventory
    says (an owner that predates saying it: none until the app sends again)."""
    for lk in sup.by_launch:
        sup.told_status(lk, (live.get(lk) or {}).get("status_text"))


def _restarts_since(old: im.Instance, generation: int) -> int:
    """The restarts among the launches made after ``old`` was saved, up to the owner's
    ``generation``: each one past the instance's first launch counts
    (im.Instance._launch), as it would have, had this backend seen it made."""
    return max(0, generation - max(old.generation, old.base_generation + 1))


def _launches_since(old: im.Instance, generation: int) -> list[str]:
    """The launch keys of ``old``'s instance whose exits its saved ``exits`` lack, up
    to the owner's live ``generation``: its own launch when it was saved with it under
    way (STARTING to RESTARTING: it ended after the save), then every one made after
    it, as _restarts_since counts their restarts. The newest MAX_UNSAVED of them (a
    recovery asks the owner about each)."""
    first = old.generation if old.state in _IN_FLIGHT else old.generation + 1
    first = max(first, old.base_generation + 1, generation - MAX_UNSAVED)
    app = old.app
    return [f"{app.stack}/{app.name}/{old.index}/{g}" for g in range(first, generation)]


def _age(row: dict[str, Any]) -> float | None:
    """How long the owner's launch ``row`` has run (its ``started_at``, wall clock), so
    an adopted instance's uptime is its process's; None when the row does not say."""
    started = row.get("started_at")
    if isinstance(started, bool) or not isinstance(started, int | float):
        return None
    return max(0.0, time.time() - started)


def _configured(wire: dict[str, Any], instances: int) -> bool:
    """Whether the saved instance is one the config still has (its index is in range)."""
    index = wire.get("instance")
    return not isinstance(index, int) or index < instances   # from_wire judges the rest


def _retire(sup: Supervisor, key: str, wire: dict[str, Any], running: set[str]) -> None:
    """A saved instance the applied config no longer has: its removal was cut short (a
    crash before its record was written). Its last generation becomes the key's floor,
    so that an instance added back never reuses a spent launch key; its record is
    dropped at the next save, unless a launch of it still runs (the operation that
    removes it resumes, stops it and forgets it)."""
    generation = wire.get("generation")
    if isinstance(generation, int) and not isinstance(generation, bool) and generation >= 0:
        sup.retire(key, generation, save=key not in running)


def _resume(sup: Supervisor, result: Adoption, now: float) -> None:
    """Re-arm timers and probes, and ask again for the stop of an instance saved while
    it was being stopped (the stop's answer went to the generation that asked: the
    owner's stop is idempotent, this one joins it and hears when it ends). Instances
    whose process vanished are left to :func:`relaunch_lost` (after the observation
    backlog had its chance to explain)."""
    missing = set(result.missing)
    for key, inst in list(sup.instances.items()):
        if inst.launch_key not in missing:
            again = [im.Stop(inst.generation, inst.launch_key)] \
                if inst.state in _STOPPING and inst.launch_key is not None else []
            sup.execute(key, [*inst.resume(now), *again])


_STOPPING = frozenset({im.State.STOPPING, im.State.RESTARTING})


_IN_FLIGHT = frozenset({im.State.STARTING, im.State.RUNNING, im.State.READY,
                        im.State.STOPPING, im.State.RESTARTING})


def missed_exits(sup: Supervisor, live_keys: set[str]) -> list[str]:
    """Launch keys of instances that believe their process runs (or is being stopped)
    while the owner no longer runs it: their exit event was lost."""
    return [i.launch_key for i in sup.instances.values()
            if i.pid is not None and i.launch_key is not None
            and i.launch_key not in live_keys and i.state in _HAS_PROCESS]


def owner_replaced(certificate: Mapping[str, Any] | None, instance: str) -> bool:
    """Whether the last certificate (its body, valid or not) vouched under another owner
    instance than ``instance``: the owner the instances ran under has stopped since (it
    stopped them itself, or they ended with the machine), which explains why its
    launches are gone. False when no certificate tells (a damaged one's owner that is
    no map, or an instance that is no string, tells nothing)."""
    owner = (certificate or {}).get("owner")
    before = owner.get("instance") if isinstance(owner, dict) else None
    return isinstance(before, str) and before != instance


async def record_lost_exits(sup: Supervisor, live_keys: set[str],
                            launch_row: Callable[[str], Awaitable[dict[str, Any] | None]],
                            known: Mapping[str, str | None] | None = None) -> list[str]:
    """Record the exit of every instance whose process ended while no backend watched
    (``tenure down`` stopped it with the owner, it crashed between two generations, the
    machine restarted): an ``exit`` event at the time the owner recorded, from the
    owner's row of its launch (``launch_row``: None when the owner has none), and its
    count in the instance's exits. ``requested`` when the owner stopped it or the
    instance was being stopped. Returns the keys recorded. Call before
    :func:`relaunch_lost`, which starts them again; ``known`` as there."""
    told = sup.events.exits_told if sup.events is not None else {}
    ended = [(k, i) for k, i in sup.instances.items()
             if i.state in _HAS_PROCESS and i.pid is not None
             and i.launch_key is not None and i.launch_key not in live_keys
             and (known is None or i.launch_key == known.get(k))
             and told.get(k) != i.pid]   # its exit came with the replay: told already
    rows = await asyncio.gather(*(launch_row(str(i.launch_key)) for _, i in ended))
    recorded = []
    for (key, inst), row in zip(ended, rows, strict=True):
        if row is None or row.get("pid") != inst.pid:
            continue                       # not the process this instance knew
        _count_exit(sup, key, inst, row,
                    stopping=inst.state in (im.State.STOPPING, im.State.RESTARTING))
        recorded.append(key)
    return recorded


async def record_unsaved_exits(
        sup: Supervisor, unsaved: Mapping[str, list[str]],
        launch_row: Callable[[str], Awaitable[dict[str, Any] | None]]) -> list[str]:
    """Count the exits of the launches made after an instance was last saved and before
    the launch adopted for it (``Adoption.unsaved``: a restart, or a crash and its
    relaunch, in the half second before the previous generation died unsaved), from the
    owner's row of each (``launch_row``, as for :func:`record_lost_exits`), into the
    instance's exits, each told as an ``exit`` event at the time it ended: as
    _restarts_since rebuilds their restarts. A launch that had no process, that the
    owner no longer records (pruned), or that it does not record as ended is skipped.
    Returns the launch keys recorded."""
    asked = [(key, lk) for key, keys in unsaved.items() if key in sup.instances
             for lk in keys]
    rows = await asyncio.gather(*(launch_row(lk) for _, lk in asked))
    recorded = []
    for (key, lk), row in zip(asked, rows, strict=True):
        if row is None or not isinstance(row.get("pid"), int) \
                or moment(row.get("ended_at")) is None:
            continue
        _count_exit(sup, key, sup.instances[key], row, stopping=False)
        recorded.append(lk)
    return recorded


def _count_exit(sup: Supervisor, key: str, inst: im.Instance, row: dict[str, Any], *,
                stopping: bool) -> None:
    """Count how the owner's ``row`` of a launch of instance ``key`` says it ended in
    ``inst``'s exits, and tell it as an ``exit`` event at the time the owner recorded
    (its ``ended_at``; now when it has none): ``requested`` when the owner stopped it,
    or when the instance was ``stopping`` it."""
    ex = row.get("exit")
    ex = ex if isinstance(ex, dict) else {}
    code, sig = ex.get("exit_code"), ex.get("signal")
    requested = ex.get("stopped") is True or stopping
    inst.count_exit(ExitReason.REQUESTED if requested else
                    EXIT_REASON[im.exit_outcome(code, sig)])
    sup.dirty.add(key)
    if sup.events is not None:
        sup.events.record_at(row.get("ended_at"), "exit", key, pid=row["pid"],
                             exit_code=code, signal=sig,
                             core_dumped=ex.get("core_dumped") is True,
                             requested=requested)


def relaunch_lost(sup: Supervisor, live_keys: set[str], stopped_stacks: set[str],
                  known: Mapping[str, str | None] | None = None, *,
                  defer: bool = False) -> list[str]:
    """Instances whose launch the owner does not run (it ended while no backend watched,
    the owner was replaced, or a previous generation died between asking for a launch or
    a stop and hearing the answer): begin again from stopped, and start the ones that
    were wanted up — nobody asked them down. ``known``: instance key -> the launch it
    was adopted on, when ``live_keys`` was read; only those launches can be lost (one
    this generation made since, replaying the owner's events, is not in ``live_keys``
    and is no loss: starting the instance again ran it twice). ``defer``: their start
    waits (Supervisor.deferred) for the config queued before this generation began."""
    lost = [k for k, i in sup.instances.items()
            if i.state in _IN_FLIGHT and i.launch_key not in live_keys
            and (known is None or i.launch_key == known.get(k))]
    for key in lost:
        old = sup.instances[key]
        fresh = im.Instance(old.app, old.index)
        fresh.carry(old)
        sup.instances[key] = fresh
        sup.dirty.add(key)
        if old.state is im.State.STOPPING or old.app.stack in stopped_stacks:
            continue
        if defer:
            sup.deferred.add(key)
        else:
            sup.feed(key, im.Start())
    return lost


def defer_backoffs(sup: Supervisor, stopped_stacks: set[str]) -> list[str]:
    """While a queued config waits (``relaunch_lost(defer=True)``): an instance waiting
    out a backoff would start by itself before that config is decided; it is stopped
    and deferred instead (its saved state stays as it was). Returns the keys."""
    keys = [k for k, i in sup.instances.items()
            if i.state is im.State.BACKOFF and i.app.stack not in stopped_stacks]
    for key in keys:
        sup.feed(key, im.StopRequested())
        sup.deferred.add(key)
    return keys


def resume_wanted_starts(sup: Supervisor, store: BackendStore, stopped_stacks: set[str]
                         ) -> list[str]:
    """Take over the starts a previous generation recorded as wanted and did not live to
    take. One held for its ``after`` apps (WaitKind.ORDER) waits for them again, only
    for what is left of its saved deadline, so a handoff neither cuts that wait short
    nor starts it over; one whose instance is no longer down was taken up meanwhile and
    is forgotten. Any other (the second half of a restart, a start asked while a stop
    ran, or a record that says no kind, from a release before kinds were recorded):
    the instance is stopped (the owner may be stopping it still: a stop is idempotent,
    and its exit is then the stop's, not a crash) and started once down, as that
    generation would have. Ones whose instance is gone, or whose stack is stopped, are
    forgotten. Returns the keys taken over."""
    taken = []
    waits = store.start_waits()
    for key in store.wanted_starts():
        inst = sup.instances.get(key)
        if inst is None or inst.app.stack in stopped_stacks:
            store.drop_start(key, None)
            continue
        wait = Wait.from_row(key, waits.get(key))
        if wait is not None and wait.kind is WaitKind.ORDER:
            if inst.state not in DOWN:
                log.info("%s: its start, held for %s, was made before the previous "
                         "generation ended; nothing left to start", key,
                         ", ".join(inst.app.after) or "its after apps")
                store.drop_start(key, None)
                continue
            log.info("%s: its start waited for %s in the previous generation; it waits "
                     "for them %.0f s more", key, ", ".join(inst.app.after),
                     max(wait.deadline - time.time(), 0.0))
            sup.resume_order_wait(key, wait.deadline)
        else:
            log.info("%s: a restart or start asked of the previous generation wanted it "
                     "started once down; starting it as that generation would have", key)
            sup.start_when_down(key, after_stop_bound(inst.app.stop, 0.0),
                                stop=inst.state not in DOWN)
        taken.append(key)
    return taken
