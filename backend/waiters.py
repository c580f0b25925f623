"""Coroutines waiting for a condition that only changes when the owner of that state says
so: ``wake()`` after each change makes every waiter re-check its own predicate (no task
and no polling per event)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["Waiters"]


class Waiters:
    def __init__(self) -> None:
        self._futures: set[asyncio.Future[None]] = set()

    def wake(self) -> None:
        futures, self._futures = self._futures, set()
        for fut in futures:
            if not fut.done():
                fut.set_result(None)

    async def until(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``done()`` holds, re-checked after every wake; False when
        ``timeout`` seconds (None: no limit) ran out first."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not done():
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return False
            fut: asyncio.Future[None] = loop.create_future()
            self._futures.add(fut)
            try:
                async with asyncio.timeout(left):
                    await fut
            except TimeoutError:
                return done()
            finally:
                self._futures.discard(fut)
        return True
