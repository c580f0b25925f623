"""The guardian daemon: key, state, owner connection, admin socket, boot, and the
orderly exit that leaves applications and the recovery certificate in place.

Exit statuses: 0 clean stop, 2 unsafe or unreadable state, 5 another guardian runs.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import time

from protocol.errors import AlreadyRunning, TenureError
from protocol.server import RpcServer

from .backendproc import control
from .boot import boot
from .cold import watch_owner
from .coordinator import Coordinator
from .keys import load_or_create_key
from .paths import GuardianPaths
from .service import GuardianService
from .state import StateStore

__all__ = ["run"]

log = logging.getLogger("tenure.guardian")


def _lock(paths: GuardianPaths) -> int:
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AlreadyRunning(f"another guardian runs on {paths.home}") from None
    return fd


async def _connect_owner(co: Coordinator, stop: asyncio.Event) -> bool:
    """Wait for the owner (it may be starting beside us, or restarting): ask often at
    first, then once a second."""
    delay = 0.05
    while not stop.is_set():
        try:
            await co.connect_owner()
            return True
        except TenureError as exc:
            if delay >= 1.0:
                log.warning("owner not reachable yet: %s", exc)
            try:
                async with asyncio.timeout(delay):
                    await stop.wait()
            except TimeoutError:
                pass
            delay = min(1.0, delay * 1.5)
    return False


async def serve(paths: GuardianPaths) -> int:
    paths.prepare()
    _lock(paths)
    key = load_or_create_key(paths.key)
    state = StateStore(paths.state_db)
    co = Coordinator(paths, state, key)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # metrics 1: the ``metrics`` method (guardian.counters)
    server = RpcServer(paths.sock, co.identity, {"guardian": 1, "metrics": 1},
                       GuardianService(co, stop.set).methods())
    await server.start()
    co.write_diagnostics()
    co.prepare_spare()  # the first generation's interpreter starts while we connect
    try:
        if await _connect_owner(co, stop):
            try:
                async with co.command_lock:   # no RPC flow or exit recovery beside it
                    await boot(co)
            except Exception as exc:  # the guardian serves status and recover regardless
                log.exception("boot: %s", exc)
                co.unhealthy = {"task": "boot", "reason": str(exc), "at": time.time()}
            await co.drop_spare()  # unused when a living generation was adopted
            print(f"READY {co.identity.instance}", flush=True)
            _sd_notify("READY=1")
            co.spawn(watch_owner(co), "owner watch")
            await stop.wait()
    finally:
        _sd_notify("STOPPING=1")
        server.begin_drain()
        await co.cancel_tasks()
        await co.drop_spare()
        await _retire_backend(co)
        await server.close()
        if co.owner is not None:
            await co.owner.close()
        state.close()
    return 0


async def _retire_backend(co: Coordinator) -> None:
    """The guardian stops; its backend stops with it, applications stay with the owner.
    The next guardian recovers from the certificate."""
    bp = co.current
    if bp is None or not bp.alive():
        return
    bp.expected_exit = True
    try:
        await _certify(co, deadline=5.0)
        await control(co.paths.api_sock, "generation.retire", timeout=5.0)
    except TenureError as exc:
        log.warning("backend did not retire cleanly: %s", exc)
    await bp.stop(term_after=5.0)


async def _certify(co: Coordinator, deadline: float) -> bool:
    """Ask the backend for a fresh recovery certificate, so that a planned restart of
    the guardian is recovered at once; it publishes only when quiet, so ask again for a
    few seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while loop.time() < end:
        r = await control(co.paths.api_sock, "generation.certify", timeout=5.0)
        if r.get("published"):
            return True
        await asyncio.sleep(0.2)
    log.warning("no recovery certificate before stopping; the next start may be blocked")
    return False


def _sd_notify(msg: str) -> None:
    from protocol.notify import sd_notify
    sd_notify(msg)


def run(paths: GuardianPaths) -> int:
    try:
        return asyncio.run(serve(paths))
    except AlreadyRunning as exc:
        log.error("%s", exc)
        return 5
    except TenureError as exc:
        log.error("%s", exc)
        return 2
