"""``events.read``: the event log through the API (viewer role), for ``tenure events``."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING, Any

from protocol.errors import Unavailable
from protocol.schema import Field, Schema, check_int
from protocol.server import Call, Method

from .certify import persist
from .events import KINDS
from .targets import check_targets, select_all

if TYPE_CHECKING:
    from .generation import Generation

__all__ = ["events_methods"]


def _check_kinds(v: list[object]) -> str | None:
    bad = [k for k in v if k not in KINDS]
    return f"unknown kinds {bad}; kinds are {', '.join(KINDS)}" if bad else None


S_EVENTS = Schema(
    Field("after", int, required=False, check=check_int(0, 2**62)),
    Field("tail", int, required=False, check=check_int(0, 100_000)),
    Field("since_time", float, required=False, check=check_int(0, 2**40)),
    Field("limit", int, required=False, default=1000, check=check_int(1, 10_000)),
    Field("targets", list, required=False, check=check_targets),
    Field("kinds", list, required=False, check=_check_kinds))


def events_methods(gen: Generation) -> dict[str, Method]:
    async def read(call: Call) -> Any:
        if gen.events is None or gen.sup is None:
            raise Unavailable("the event log is not open yet")
        p = call.params
        targets = p.get("targets")
        # instances removed since (scaled away, their app gone) keep their events: a
        # follower of one goes on, and `tenure events s/gone/1` still answers
        keys = set(select_all({*gen.sup.instances, *gen.events.targets()}, targets)) \
            if targets else None
        kinds = set(p["kinds"]) if p.get("kinds") else None
        # What happened before this request is in the answer: events are written every
        # 0.5 s, and a `tenure restart` followed at once by `tenure events` found none
        # of its own. Written as a round of persist (with the states they tell of: an
        # exit written alone would be told again by a generation recovering from a
        # crash). A failed write leaves them buffered (persist reports and retries):
        # the answer then holds what is written.
        with contextlib.suppress(sqlite3.Error):
            persist(gen)
        return gen.events.read(after=p.get("after"), tail=p.get("tail"),
                               since_time=p.get("since_time"), limit=p["limit"],
                               targets=keys, kinds=kinds)

    return {"events.read": Method(read, S_EVENTS, role="viewer")}
