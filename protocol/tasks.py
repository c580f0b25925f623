"""Background tasks of a daemon that never end silently."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["background"]


def background(coro: Coroutine[Any, Any, Any], what: str, log: logging.Logger,
               on_failure: Callable[[BaseException], None] | None = None
               ) -> asyncio.Task[Any]:
    """Run ``coro`` as a task until it ends or is cancelled; an exception that ends it
    is logged on ``log`` with its traceback (``the WHAT loop failed and stopped``),
    never lost, and then given to ``on_failure``."""
    task = asyncio.create_task(coro, name=what)

    def ended(t: asyncio.Task[Any]) -> None:
        exc = None if t.cancelled() else t.exception()
        if exc is not None:
            log.error("the %s loop failed and stopped", what, exc_info=exc)
            if on_failure is not None:
                on_failure(exc)
    task.add_done_callback(ended)
    return task
