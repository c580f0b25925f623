"""Whether the backend generation in control answers, not only whether it lives.

A generation whose event loop is stuck (a blocking call, a deadlock, SIGSTOP) keeps its
pid: `tenure backend status` said "alive" while every `tenure` command failed with
BACKEND_UNAVAILABLE after its connect timeout. Every PROBE_S the guardian opens a
connection to the API socket and completes the handshake, which needs the generation's
loop to run, and checks that the process answering is that generation (the handshake
proves the peer's pid). The outcome is kept on the BackendProcess (``answering``,
``unanswered_since``) for the diagnostics and logged when it changes.

Nothing is killed for not answering: a living backend that cannot be verified is never
killed automatically (docs/recover.md says what the operator can do).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from protocol.aclient import AsyncClient
from protocol.errors import TenureError

from .boot import retry_silent

if TYPE_CHECKING:
    from .backendproc import BackendProcess
    from .coordinator import Coordinator

__all__ = ["PROBE_S", "probe", "watch_backend"]

log = logging.getLogger("tenure.guardian")

PROBE_S = 2.0


async def probe(api_sock: str, pid: int, timeout: float) -> str | None:
    """None when generation ``pid`` completes a handshake on ``api_sock`` within
    ``timeout`` seconds; else why not. Raises nothing but cancellation."""
    c = AsyncClient(api_sock, timeout=timeout, connect_timeout=timeout, pin=False,
                    name="guardian", allow_group=True)
    try:
        welcome = await c.connect()
    except TenureError as exc:
        return exc.msg
    finally:
        await c.close()
    if welcome.identity.pid != pid:
        return f"another process (pid {welcome.identity.pid}) answers on {api_sock}"
    return None


def note(bp: BackendProcess, why_not: str | None, now: float) -> bool | None:
    """Record one probe's outcome on ``bp``; returns what ``bp.answering`` was before
    (None: not probed yet)."""
    was = bp.answering
    bp.answering = why_not is None
    bp.unanswered_why = why_not
    if why_not is None:
        bp.unanswered_since = None
    elif bp.unanswered_since is None:
        bp.unanswered_since = now
    return was


async def watch_backend(co: Coordinator, interval: float = PROBE_S,
                        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
    """Probe the generation in control every ``interval`` seconds, for as long as the
    guardian serves. A handoff or a recovery under way owns the generation: no probe
    then. With none in control, a recovery blocked on a living backend that did not
    answer is tried again once it answers or is gone (guardian.boot.retry_silent)."""
    while True:
        await sleep(interval)
        bp = co.current
        if bp is None:
            await retry_silent(co)
            continue
        if not bp.alive() or co.command_lock.locked():
            continue
        why_not = await probe(co.paths.api_sock, bp.pid, interval)
        if bp is not co.current:
            continue
        was = note(bp, why_not, time.time())
        if why_not is None and was is False:
            log.info("backend generation %s (pid %d) answers again", bp.activation, bp.pid)
        elif why_not is not None and was is not False:
            log.warning("backend generation %s (pid %d) is alive but does not answer: %s",
                        bp.activation, bp.pid, why_not)
        else:
            continue
        co.write_diagnostics()
