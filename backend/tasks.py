"""Background tasks a component owns: kept in its set until they end, and never dying
silently (a failure is logged with its traceback)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

__all__ = ["spawn"]


def spawn(tasks: set[Any], coro: Awaitable[Any], log: logging.Logger,
          what: str) -> asyncio.Future[Any]:
    """Run ``coro`` as a task held in ``tasks`` until it ends; an exception it ends with
    is logged as ``<what> task failed``."""
    task = asyncio.ensure_future(coro)
    tasks.add(task)

    def done(t: asyncio.Future[Any]) -> None:
        tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.error("%s task failed", what, exc_info=t.exception())
    task.add_done_callback(done)
    return task
