"""Start order along ``after``, wherever an instance is started: an apply's levels,
``tenure start``, ``tenure stack start``, ``tenure up`` after ``down``, a recovery.

An instance whose app names ``after`` apps (of its stack) is not launched while an
instance of one of them is on its way up — starting, running but not ready yet, backing
off, being restarted — or is itself waiting to start. Its start waits as a pending start
(backend.after_stop: the latest intent wins, a stop withdraws it, it is kept in
backend.db across generations) and is taken once none is, or after :data:`ORDER_WAIT`
seconds whatever they do. ``after`` orders, it does not require: an app whose
dependency never comes up still starts in the end, and its own restart policy decides
from there, as systemd's ``After=`` without ``Requires=``.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping

from . import instance as im

__all__ = ["COMING_UP", "ORDER_WAIT", "once_ready", "stop_levels", "waits_for"]

ORDER_WAIT = 300.0   # seconds a start waits for its `after` apps, at most
COMING_UP = frozenset({im.State.STARTING, im.State.RUNNING, im.State.BACKOFF,
                       im.State.RESTARTING})


def waits_for(instances: Mapping[str, im.Instance], pending: Container[str], key: str
              ) -> list[str]:
    """The instances of ``key``'s ``after`` apps it waits for now (``pending``: the
    instances whose start is waiting), sorted; [] when it may start."""
    app = instances[key].app
    if not app.after:
        return []
    return sorted(k for k, i in instances.items()
                  if i.app.stack == app.stack and i.app.name in app.after
                  and (i.state in COMING_UP or k in pending))


def once_ready(deps: list[str]) -> str | None:
    """The reason a start held for ``deps`` (:func:`waits_for`) gives: ``starts once
    o/db/0 is ready``; None when it waits for none."""
    if not deps:
        return None
    return f"starts once {', '.join(deps)} {'is' if len(deps) == 1 else 'are'} ready"


def stop_levels(instances: Mapping[str, im.Instance], keys: Collection[str]
                ) -> list[list[str]]:
    """``keys`` (instances to stop) as levels, the first to stop first: an instance is
    in level n + 1 when an app that starts after its app (``after`` names it, directly
    or through apps of the stack not stopping now) is in level n. Apps are read from
    every instance of ``instances`` (each on its own definition), stack by stack; the
    stacks stop side by side, level n of each in level n. Keys sorted within a level."""
    rank = _ranks(instances)
    by_level: dict[int, list[str]] = {}
    for k in sorted(keys):
        app = instances[k].app
        by_level.setdefault(rank[(app.stack, app.name)], []).append(k)
    return [by_level[n] for n in sorted(by_level)]


def _ranks(instances: Mapping[str, im.Instance]) -> dict[tuple[str, str], int]:
    """(stack, app) -> its stop rank: 0 when no app waits for it, else one more than the
    highest rank of the apps that wait for it. Apps in a cycle (definitions of two
    configs; one parsed config has none) rank after all the others."""
    waiting: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for inst in instances.values():
        app = inst.app
        waiting.setdefault((app.stack, app.name), set())
        for dep in app.after:
            waiting.setdefault((app.stack, dep), set()).add((app.stack, app.name))
    rank: dict[tuple[str, str], int] = {}
    pending = set(waiting)
    while pending:
        ready = [a for a in pending if waiting[a] <= rank.keys()]
        if ready:
            for a in ready:
                rank[a] = 1 + max((rank[w] for w in waiting[a]), default=-1)
        else:   # a cycle: what is left stops together, last
            last = 1 + max(rank.values(), default=-1)
            rank.update((a, last) for a in pending)
        pending.difference_update(rank)
    return rank
