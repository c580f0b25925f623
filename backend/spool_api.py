"""``queue.show``: how a config queued for the backend (backend.spool) ended, for the
`tenure up --config` that queued it on a home whose daemons were down, and waits."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from typing import TYPE_CHECKING, Any

from protocol.errors import Unavailable
from protocol.schema import Field, Schema, check_int
from protocol.server import Call, Method

from . import queuefile, spool
from .certify import persist

if TYPE_CHECKING:
    from .generation import Generation

__all__ = ["QUEUE_WAIT_MAX", "queue_methods", "queue_result"]

QUEUE_WAIT_MAX = 30   # seconds one call may wait
POLL_S = 0.1


def _check_request(v: str) -> str | None:
    return None if 0 < len(v) <= 128 else "a request id of 1 to 128 characters"


S_QUEUE_SHOW = Schema(Field("request_id", str, check=_check_request),
                      Field("wait", float, required=False, default=0.0,
                            check=check_int(0, QUEUE_WAIT_MAX)))


def queue_result(gen: Generation, request_id: str) -> dict[str, Any]:
    """``{state}``: ``waiting`` (queued, or taken and not decided), ``admitted`` (with
    its ``operation`` row and ``plan``), ``no-change`` (with ``plan``), ``rejected``
    (``code``, ``msg``), ``unknown`` (not queued, and no generation left word of it
    here: the one that took it ended, or a newer queued config replaced it)."""
    if gen.store is None:
        raise Unavailable("the backend's store is not open yet")
    # decided first: a taken file that could not be removed still names its request
    kept = gen.spool.result(request_id) if gen.spool is not None else None
    op = gen.store.operation_by_request(request_id)
    if op is None and kept is not None and kept.get("operation"):
        # an operation already applying this config was joined (it has no request id)
        op = {**gen.store.operation(kept["operation"]), "joined": True}
    if op is not None:
        return {"state": "admitted", "operation": op, "plan": (kept or {}).get("plan")}
    if kept is not None:
        return kept
    if request_id in queuefile.pending(gen.layout.queued_config):
        return {"state": "waiting"}
    return _told(gen, request_id) or {"state": "unknown"}


def _told(gen: Generation, request_id: str) -> dict[str, Any] | None:
    """What the ``queued-config`` event of ``request_id`` says of its end: another
    generation took it (one a guardian retired as this one started, say)."""
    if gen.events is None:
        return None
    with contextlib.suppress(sqlite3.Error):   # what is buffered is read too (written
        persist(gen)                           # with the states, as every round is)
    for ev in reversed(gen.events.read(tail=spool.RESULTS_KEPT, kinds={queuefile.KIND})["events"]):
        d = ev["data"]
        if d.get("request_id") != request_id:
            continue
        if d.get("outcome") == "rejected":
            return {"state": "rejected", "code": d.get("code") or "INTERNAL",
                    "msg": d.get("msg") or "rejected by the backend"}
        return {"state": d.get("outcome"), "operation": None, "plan": None}
    return None


def queue_methods(gen: Generation) -> dict[str, Method]:
    async def show(call: Call) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + call.params["wait"]
        while True:
            result = queue_result(gen, call.params["request_id"])
            if result["state"] != "waiting" or loop.time() >= deadline:
                return result
            await asyncio.sleep(POLL_S)

    return {"queue.show": Method(show, S_QUEUE_SHOW, role="viewer")}
