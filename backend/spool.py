"""Queued configs: how `tenure up --no-wait` hands its config to a backend that is not
running yet.

The command starts the owner and the guardian and returns without waiting for a backend
generation to plan and apply. Before it starts them it writes the config, already parsed
once, to ``backend/queued-config.json`` (atomic, 0600; a ``queued-config`` record of
format 1: ``text``, ``source``, ``request_id``, ``queued_at``). Every backend generation
takes that file when it is ready and then every 0.5 s, so a queue that a running
generation did not see at its start is taken all the same.

Taking is one state machine over two files (``queued`` and ``taken``, beside it):

    state    event                                   action                  next
    queued   a generation takes it                   rename to taken         taken
    taken    plan admitted (or nothing to change)    remove taken            (none)
    taken    busy: OPERATION_IN_PROGRESS, STALE_PLAN,
             the owner out of reach or replaced      keep taken              taken
    taken    refused (CONFIG_INVALID and the rest)   rename to rejected      rejected
    taken    admitted or refused, but the file cannot
             be removed or moved (an I/O error)      log once, leave it      settled
    settled  a generation finds it again             remove it, or log once  (none) or
                                                     and leave it            settled
    settled  a newer config is queued                rename over settled     taken

A settled file is known by this spool, and by a later generation through the
``queued-config`` event the deciding generation recorded with its request id (read from
backend.db): it is never applied twice, since applying it again would plan its old text
against what is applied now (a later `tenure apply` undone), and it blocks no newer
queue. The rename first means a newer `up --no-wait` that queues meanwhile is never lost: it
lands in a fresh ``queued`` file, taken on a later tick, and applied after this one (last
queued wins, as with two `tenure apply`). A ``taken`` file left by a generation that died
is taken again first; the request id makes a second admission of the same plan return
the first operation instead of a new one. A ``rejected`` file stays for the operator
(the newest only) and the ``queued-config`` event names its code and message.

`tenure up --config` on a home whose daemons are down queues its config the same way
and waits for it: the generation that takes it keeps how each request ended
(:meth:`Spool.result`, the API's ``queue.show``), and defers the start of the applied
config's instances until the queued one is decided (backend.generation).

The record and the names of its files are backend.queuefile's (the command line's side).
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from protocol.errors import (
    OperationInProgress,
    OwnerChanged,
    StalePlan,
    TenureError,
    TransportError,
    Unavailable,
)

from .events import request_event
from .queuefile import KIND, files, read_queued

__all__ = ["Spool"]

log = logging.getLogger("tenure.backend")

TICK_S = 0.5

BUSY = (OperationInProgress, StalePlan, TransportError, Unavailable, OwnerChanged)
"""Errors after which the taken config is tried again on the next tick (OWNER_CHANGED:
this generation's owner is gone, and the generation the guardian starts takes it)."""

Admit = Callable[[str, str, str], Awaitable[dict[str, Any]]]
"""(text, source, request_id) -> the operation admitted ({"id": None, ...}: no change)."""

Decided = Callable[[str], dict[str, Any] | None]
"""request_id -> the data of its ``queued-config`` event, None when none was written
(backend.events.request_event on the backend.db beside the queue, by default)."""


class Spool:
    """Takes the queued config of one home for one generation (see the module doc)."""

    def __init__(self, path: str, admit: Admit,
                 record: Callable[..., None] = lambda *a, **k: None,
                 decided: Decided | None = None) -> None:
        self.queued, self.taken, self.rejected = files(path)
        self._admit = admit
        self._record = record
        self._decided = decided or functools.partial(
            request_event, os.path.join(os.path.dirname(path), "backend.db"), KIND)
        self._checked: tuple[int, int, int] | None = None   # a taken file asked of the log
        self._busy: str | None = None       # the code last logged for a busy attempt
        self._stuck: tuple[int, int, int] | None = None   # a taken file left as it is
        self._request: str | None = None    # the request id of the record being taken
        self.operation: str | None = None   # the operation the last take admitted
        self._results: dict[str, dict[str, Any]] = {}   # request id -> how it ended

    def result(self, request_id: str) -> dict[str, Any] | None:
        """How request ``request_id`` ended here: ``{state: admitted | no-change |
        rejected, operation, plan}`` or ``{state: rejected, code, msg}``; None when
        this generation did not take it."""
        return self._results.get(request_id)

    def waits(self) -> bool:
        """Whether a config waits to be taken or decided: queued, or taken and not one
        already decided that could not be moved (by this spool, or by an earlier
        generation as its ``queued-config`` event says). A log that cannot be read
        counts as waiting."""
        if os.path.lexists(self.queued):
            return True
        try:
            return os.path.lexists(self.taken) and not self._settled()
        except (sqlite3.Error, TenureError):
            return True

    def _settled(self) -> bool:
        """Whether the taken file is one already decided that could not be removed or
        set aside: this spool left it (``_stuck``), or its request has a
        ``queued-config`` event, recorded by the generation that decided it. Asked of
        the event log once per file. Raises sqlite3.Error, UnsafePath (the log cannot
        be read)."""
        fid = _file_id(self.taken)
        if fid is None or fid == self._stuck:
            return fid is not None
        if fid == self._checked:
            return False
        try:
            rid = read_queued(self.taken)["request_id"]
        except (OSError, TenureError):
            return False   # taken as usual: _apply refuses it with its code
        told = self._decided(rid)
        self._checked = fid
        if told is None:
            return False
        # applying it again would plan its old text against what is applied now (a
        # no-change or joined decision left no operation row carrying the request id):
        # removed now (a generation that died before it could), else left as it is
        try:
            os.unlink(self.taken)
            log.info("queued config %s was decided (%s) by an earlier generation: %s "
                     "removed", rid, told.get("outcome"), self.taken)
        except OSError as err:
            log.error("queued config %s was decided (%s) by an earlier generation, but "
                      "%s cannot be removed (%s): left as it is", rid,
                      told.get("outcome"), self.taken, err)
            self._stuck = fid
        return True

    def _keep(self, request_id: str | None, result: dict[str, Any]) -> None:
        if request_id is None:
            return
        self._results[request_id] = result
        while len(self._results) > RESULTS_KEPT:
            del self._results[next(iter(self._results))]

    async def take(self) -> str | None:
        """One tick: the outcome (``admitted``, ``no-change``, ``busy``, ``rejected``),
        None when nothing waits. Never raises: this runs in a background loop."""
        self._request = self.operation = None
        try:
            try:
                undecided = os.path.lexists(self.taken) and not self._settled()
            except (sqlite3.Error, TenureError) as exc:
                return self._wait("EVENTS_UNREADABLE", f"whether {self.taken} was "
                                  f"decided cannot be read from the event log: {exc}")
            if undecided:
                return await self._apply()
            if not os.path.lexists(self.queued):
                return None   # (a settled taken file: applied or refused, logged once)
            try:   # over a settled taken file too: it was decided, this one was not
                os.rename(self.queued, self.taken)
            except OSError as exc:
                return self._wait("RENAME_FAILED", f"cannot take {self.queued}: {exc}")
            return await self._apply()
        except Exception as exc:   # boundary: the unexpected ends as a coded rejection
            log.exception("queued config: unexpected failure")
            return self._reject(exc)

    def _wait(self, key: str, why: str) -> str:
        """Busy: tried again next tick; logged once per kind of reason."""
        if self._busy != key:
            log.warning("queued config waits: %s", why)
            self._busy = key
        return "busy"

    async def _apply(self) -> str:
        try:
            rec = read_queued(self.taken)
            self._request = rec["request_id"]
            op = await self._admit(rec["text"], rec["source"], rec["request_id"])
        except BUSY as exc:
            return self._wait(exc.code_str, str(exc))
        except TenureError as exc:
            return self._reject(exc)
        try:
            os.unlink(self.taken)
        except OSError as err:   # admitted all the same: never taken again
            log.error("queued config: cannot remove %s: %s", self.taken, err)
            self._stuck = _file_id(self.taken)
        outcome = "no-change" if op.get("id") is None else "admitted"
        self.operation = op.get("id")
        self._keep(rec["request_id"], {"state": outcome, "operation": op.get("id"),
                                       "plan": op.get("planned"),
                                       "joined": op.get("joined") is True})
        log.info("queued config %s from %s: %s %s", rec["request_id"], rec["source"],
                 outcome, op.get("id") or "")
        self._record(KIND, outcome=outcome, request_id=rec["request_id"],
                     source=rec["source"], operation=op.get("id"))
        self._busy = None
        return outcome

    def _reject(self, exc: Exception) -> str:
        code = exc.code_str if isinstance(exc, TenureError) else "INTERNAL"
        log.error("queued config rejected (%s): %s; kept as %s", code, exc, self.rejected)
        try:
            os.replace(self.taken, self.rejected)
        except FileNotFoundError:
            pass
        except OSError as err:   # it stays taken, and is not tried again
            log.error("queued config: cannot set %s aside: %s", self.taken, err)
            self._stuck = _file_id(self.taken)
        self._record(KIND, outcome="rejected", code=code, msg=_why(exc), file=self.rejected,
                     request_id=self._request)
        self._keep(self._request, {"state": "rejected", "code": code, "msg": _why(exc)})
        self._busy = None
        return "rejected"


MAX_WHY = 500   # characters of the refusal kept in the event
RESULTS_KEPT = 32   # requests whose ending a generation remembers (Spool.result)


def _why(exc: Exception) -> str:
    """The refusal's message for the event: what `tenure up` would have printed (the
    file, line, key and problem of a CONFIG_INVALID), one line, bounded."""
    text = exc.msg if isinstance(exc, TenureError) else f"{type(exc).__name__}: {exc}"
    line = " ".join(text.split())
    return line if len(line) <= MAX_WHY else line[:MAX_WHY - 1] + "…"


def _file_id(path: str) -> tuple[int, int, int] | None:
    """What tells one file at ``path`` from another put there later."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


async def run(spool: Spool, ready: Callable[[], bool],
              sleep: Callable[[float], Awaitable[Any]],
              taken: Callable[[str | None, str | None], None] = lambda o, op: None) -> None:
    """Take the queue whenever ``ready()`` (not draining, not fenced), every TICK_S;
    ``taken(outcome, operation)`` after each take."""
    while True:
        if ready():
            taken(await spool.take(), spool.operation)
        await sleep(TICK_S)
