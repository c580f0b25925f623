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

from collections.abc import Container, Mapping

from . import instance as im

__all__ = ["COMING_UP", "ORDER_WAIT", "waits_for"]

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
