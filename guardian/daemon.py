"""The guardian daemon: key, state, owner connection, admin socket, boot, and the
orderly exit that leaves applications and the recovery certificate in place. Its start
(lock, and the exec into its own release that keeps pid, lock and backend) is
guardian.start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from typing import NoReturn

from protocol.errors import HomeLost, TenureError
from protocol.homewatch import HomeMark, watch
from protocol.procfs import children
from protocol.server import RpcServer
from protocol.sighandler import add_signal_handler
from protocol.stray import ignore_stray_signals

from . import own
from .backendproc import control
from .backendwatch import watch_backend
from .boot import boot
from .cold import watch_owner
from .coordinator import Coordinator
from .diagnostics import check_diagnostics
from .keys import load_or_create_key
from .paths import GuardianPaths
from .service import GuardianService
from .state import StateStore

__all__ = ["EXIT_HOME_LOST", "serve"]

log = logging.getLogger("tenure.guardian")


FAST_CONNECT_S = 1.0
EXIT_HOME_LOST = 6   # guardian.start's other statuses: 0, 2, 5


SAY_WAITING_S = 1.0   # the pause between attempts from which each one is logged


def connect_delays() -> Iterator[float]:
    """The pauses between attempts to reach the owner: every 10 ms for the first
    FAST_CONNECT_S (at `tenure up` it starts beside us and listens ~0.15 s after its
    spawn; a pause of 50 ms and more there was time the first generation waited for
    nothing, ~60 ms of a cold start), then each 1.5 times the last, up to 1 s. An
    attempt on a socket nobody listens on is a refused connect, a few syscalls."""
    for _ in range(round(FAST_CONNECT_S / 0.01)):
        yield 0.01
    delay = 0.015
    while True:
        yield delay
        delay = min(1.0, delay * 1.5)


async def _connect_owner(co: Coordinator, stop: asyncio.Event) -> bool:
    """Wait for the owner (it may be starting beside us, or restarting), asking after
    each of :func:`connect_delays`; a warning, and a STATUS= to systemd, once it takes
    :data:`SAY_WAITING_S` per attempt."""
    for delay in connect_delays():
        if stop.is_set():
            break
        try:
            await co.connect_owner()
            return True
        except TenureError as exc:
            if delay >= SAY_WAITING_S:
                log.warning("owner not reachable yet: %s", exc)
                _sd_notify(f"STATUS=waiting for the owner (not ready until it answers): "
                           f"{exc.msg}")
            try:
                async with asyncio.timeout(delay):
                    await stop.wait()
            except TimeoutError:
                pass
    return False


async def serve(paths: GuardianPaths, mine: own.Running,
                hashed: dict[str, bytes]) -> str | None:
    """Serve until stopped. Returns None, or the release to exec into (an upgrade of the
    guardian: the backend is left running for it). ``hashed``: the first entries of the
    memo of hashed trees (guardian.start.hashed_memo)."""
    check_diagnostics(paths.diagnostics)   # before anything is created or changed
    mark = HomeMark.take(paths.home)
    key = load_or_create_key(paths.key)
    state = StateStore(paths.state_db)
    co = Coordinator(paths, state, key)
    co.hashed.update(hashed)
    co.own = mine
    co.home_mark, co.end_home_lost = mark, _home_lost
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        add_signal_handler(loop, sig, stop.set)
    ignore_stray_signals(loop, "guardian")
    # metrics 1: the ``metrics`` method (guardian.counters)
    server = RpcServer(paths.sock, co.identity, {"guardian": 1, "metrics": 1},
                       GuardianService(co, stop.set).methods())
    await server.start()
    co.spawn(watch(mark, _home_lost), "home watch")
    co.write_diagnostics()
    co.prepare_spare()  # the first generation's interpreter starts while we connect
    try:
        if await _connect_owner(co, stop):
            try:
                async with co.command_lock:   # no RPC flow or exit recovery beside it
                    await boot(co)
                    if mine.record.trial:
                        co.point("trial.boot")   # test-only: a new guardian that dies here
                    mine.ready(paths)
            except Exception as exc:  # the guardian serves status and recover regardless
                log.exception("boot: %s", exc)
                co.unhealthy = {"task": "boot", "reason": str(exc), "at": time.time()}
            await co.drop_spare()  # unused when a living generation was adopted
            print(f"READY {co.identity.instance}", flush=True)
            _sd_notify("READY=1\nSTATUS=serving")
            co.spawn(watch_owner(co), "owner watch")
            co.spawn(watch_backend(co), "backend watch")
            await stop.wait()
    finally:
        if co.reexec is None:   # a guardian that execs into its new release does not stop
            _sd_notify("STOPPING=1")
        server.begin_drain()
        await co.cancel_tasks()
        await co.drop_spare()
        if co.reexec is None:
            await _retire_backend(co)
        elif co.current is not None and co.current.alive():
            await _certify_before_exec(co)
        await server.close()
        if co.owner is not None:
            await co.owner.close()
        co.diagnostics.close()   # its last write before the state it reads closes
        state.close()
    return co.reexec


def _home_lost(loss: HomeLost) -> NoReturn:
    """Our home was deleted or replaced (logged by the watch): end now. The orderly exit
    writes and calls by path (the certificate, the backend's API socket), and what is at
    those paths now belongs to whoever made the new directory; so the children (backend
    generations and standbys, which hold no application) are killed by pid, unreaped
    children whose pids cannot be reused, and the process exits at once."""
    del loss
    for pid in children(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    logging.shutdown()
    os._exit(EXIT_HOME_LOST)


async def _retire_backend(co: Coordinator) -> None:
    """The guardian stops; its backend stops with it, applications stay with the owner.
    The next guardian recovers from the certificate."""
    bp = co.current
    if bp is None or not bp.alive():
        return
    bp.expected_exit = True
    if bp.answering is False:   # guardian.backendwatch: asking would only time out
        log.warning("backend generation %s (pid %d) does not answer (%s): stopping it "
                    "without a last certificate", bp.activation, bp.pid, bp.unanswered_why)
        await bp.stop(kill_after=2.0)
        return
    try:   # all told within TimeoutStopSec (units: 30 s), a SIGKILL's wait included
        await _certify(co, deadline=5.0)
        await control(co.paths.api_sock, "generation.retire", timeout=3.0, pid=bp.pid)
    except TenureError as exc:
        log.warning("backend did not retire cleanly: %s", exc)
        await bp.stop(kill_after=5.0)   # it was not told to exit: no grace to wait out
        return
    await bp.stop(term_after=5.0, kill_after=5.0)


async def _certify_before_exec(co: Coordinator) -> None:
    """A last certificate before the exec into the guardian's new release, should the
    new guardian not come up. Best-effort: a backend that stopped answering since the
    upgrade checked it must not keep the exec from happening, since a guardian that
    ended here would leave the backend unwatched and the move half-done; the new
    guardian's boot judges the backend afresh. Raises nothing of TenureError's."""
    try:
        await _certify(co, deadline=5.0)
    except TenureError as exc:
        log.warning("no last certificate before the exec into release %s (%s); going "
                    "ahead: the new guardian judges the backend at its start",
                    co.reexec, exc)


async def _certify(co: Coordinator, deadline: float) -> bool:
    """Ask the backend for a fresh recovery certificate, so that a planned restart of
    the guardian is recovered at once; it publishes only when quiet, so ask again for a
    few seconds, each call within what is left of ``deadline``. Raises TenureError (a
    call that failed, or did not answer in time)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while loop.time() < end:
        r = await control(co.paths.api_sock, "generation.certify",
                          timeout=max(0.05, end - loop.time()),
                          pid=None if co.current is None else co.current.pid)
        if r.get("published"):
            return True
        await asyncio.sleep(0.2)
    log.warning("no recovery certificate before stopping; the next start may be blocked")
    return False


def _sd_notify(msg: str) -> None:
    from protocol.notify import sd_notify
    sd_notify(msg)


