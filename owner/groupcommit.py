"""Group commit: the owner.db writes of concurrent requests in one transaction.

A launch commits its ``starting`` row before the process exists and its ``running`` row
before it answers (each a write of the WAL; owner.store says which commits are also
fsynced). When the backend starts 200 apps at once, 200 launch requests are in flight,
and their writes can share commits instead of paying one each: the writes queued while
the loop ran the other requests are applied together at the next turn, in one
transaction.

A write that nothing else can join is committed at once: when ``alone()`` says no other
request is open (a launch after a kill, one at a time from a client), waiting a turn
for company would only add two loop turns to its answer.

The promise is the same as one commit per write: a caller resumes only once the
transaction holding its write has committed. A write that raises is undone alone (a
savepoint each) and its caller gets the exception; a commit that fails fails every
write of the group, and none of them happened.

Single-threaded: use it from the owner's event loop only.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from protocol.durable import transaction

__all__ = ["GroupCommit"]

T = TypeVar("T")
Write = tuple[Callable[[], Any], "asyncio.Future[Any]"]


class GroupCommit:
    def __init__(self, db: sqlite3.Connection, *,
                 alone: Callable[[], bool] | None = None) -> None:
        self.db = db
        # True when no other write can join one made now (none given: always wait a turn)
        self.alone = alone
        self.commits = 0          # transactions committed (groups), for tests and stats
        self.writes = 0           # writes committed through them
        self._queued: list[Write] = []

    async def write(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` (statements on ``db``) in the next group's transaction; return its
        result once that transaction committed. Raises what ``fn`` raised (its writes
        undone), or what the commit raised (nothing of the group written)."""
        if not self._queued and self.alone is not None and self.alone():
            return self._commit_now(fn)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._flush)
        self._queued.append((fn, fut))
        return await fut

    def _commit_now(self, fn: Callable[[], T]) -> T:
        """``fn`` in a transaction of its own, committed before this returns."""
        with transaction(self.db):
            value = fn()
        self.commits += 1
        self.writes += 1
        return value

    def _flush(self) -> None:
        group, self._queued = self._queued, []
        outcomes: list[tuple[asyncio.Future[Any], Any, Exception | None]] = []
        try:
            with transaction(self.db):
                for fn, fut in group:
                    try:
                        with transaction(self.db):   # a savepoint: undone alone
                            outcomes.append((fut, fn(), None))
                    except Exception as exc:
                        outcomes.append((fut, None, exc))
        except Exception as exc:   # BEGIN or COMMIT failed: none of it happened
            for _fn, fut in group:
                if not fut.done():
                    fut.set_exception(exc)
            return
        self.commits += 1
        self.writes += sum(1 for _fut, _value, err in outcomes if err is None)
        for fut, value, err in outcomes:
            if fut.done():   # its caller was cancelled meanwhile: the write stands
                continue
            if err is None:
                fut.set_result(value)
            else:
                fut.set_exception(err)
