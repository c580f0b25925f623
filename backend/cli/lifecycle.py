"""``tenure up`` and ``tenure down``: the owner, the guardian and a backend started
(once one answers, the config of ``--config`` applied), or all of them stopped;
``up --foreground`` then waits for a signal and stops everything.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager, suppress

from backend.configfile import read_config_text
from protocol.client import Client
from protocol.errors import BadRequest, NotFound, TenureError
from protocol.startup import use_builtin_hashes

from . import render, render_changes
from .everyday import api as _api
from .everyday import call as _call
from .everyday import guardian as _guardian
from .everyday import layout as _layout
from .everyday import out as _out
from .exits import Exit
from .plans import parse_here, settle_probe, waited
from .progress import live

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from collections.abc import Callable, Iterator
    from typing import Any

__all__ = ["cmd_down", "cmd_up"]

OK, ERROR = Exit.OK, Exit.ERROR


def cmd_up(args: Any) -> int:
    if args.no_wait and args.foreground:
        raise BadRequest("--no-wait and --foreground do not go together")
    if not args.foreground:
        return _up(args)
    _stop_on_signals(args)
    try:
        return _up(args)
    except _Stopped:   # while tenure started, or before the wait began
        with suppress(OSError):   # a closed terminal (SIGHUP): stderr refuses it
            print("tenure: stopping everything (a signal came while tenure started)",
                  file=sys.stderr)
        _calm(args)
        return cmd_down(args)


def _up(args: Any) -> int:
    layout = _layout(args)
    from .upwait import wait_background_start, wait_down
    wait_background_start(layout)   # an `up --no-wait` still starting them
    wait_down(layout, args.timeout)
    if os.path.lexists(layout.maintenance):   # a home that had an owner window
        from .ownerwindow import refuse_owner_start
        refuse_owner_start(layout)  # one between two owners starts the next itself
    text, queued = _up_config(args, layout)
    if queued is not None:
        _out(args, queued, render_changes.up_queued(queued))
        return OK
    result = _up_daemons(args, layout, None if text is None else
                         (text, str(args.config.absolute())))
    if text is not None:
        with live(args, "up", settle_probe(args)):
            rid = result.pop("queued", None)
            result["apply"] = _apply_text(args, text, args.config, args.timeout,
                                          wait=not args.no_wait) if rid is None else \
                _queued_apply(args, layout, rid, wait=not args.no_wait,
                              older=lambda: _apply_text(args, text, args.config,
                                                        args.timeout, not args.no_wait))
    status = _call(args, "status")
    result["status"] = status
    if args.foreground:   # what it prints may be lost (a closed terminal); what it
        with suppress(OSError):   # started must still be stopped when it is told to
            _out(args, result, render_changes.up(result) + "\n" + render.status(status))
        return _foreground(args)
    _out(args, result, render_changes.up(result) + "\n" + render.status(status))
    op = result.get("apply", {}).get("operation", {})
    outcome = op.get("outcome", "success")
    if outcome is None and args.no_wait and op.get("id"):
        return OK   # admitted and left running, as asked
    return OK if outcome in ("success", "no-change") else ERROR


def _up_config(args: Any, layout: Any) -> tuple[str | None, dict[str, Any] | None]:
    """``up``'s config, read and parsed (a config that cannot be read or parsed starts
    nothing), and with ``--no-wait`` on a home that has run before, what the queued
    start answered (else None: the daemons are started here)."""
    from .early import take
    early, forked = None, take()   # the child forked as the command started, if any
    if args.no_wait:   # verifies the release while the config is read and parsed here
        from .background import prestart
        early = prestart(layout, forked)
    elif forked is not None:
        forked.cancel()
    if early is not None:   # its child verifies the release; here only a config is hashed
        use_builtin_hashes()
    try:
        text = None
        if args.config is not None:
            text = read_config_text(args.config)
            parse_here(text, str(args.config.absolute()))
        if early is None:
            return text, None
        from .background import start_queued
        return text, start_queued(layout, early, text, None if text is None else
                                  str(args.config.absolute()))
    finally:
        if early is not None:
            early.cancel()   # nothing is started unless start_queued said go


def _up_daemons(args: Any, layout: Any, config: tuple[str, str] | None
                ) -> dict[str, Any]:
    """Steps 1-4 of ``up`` (docs/cli.md): the owner and the guardian started unless they
    answer, the first release selected, a backend waited for. ``{started,
    release_sealed[, moved][, queued]}``: ``config`` (text, source), when they did not
    both answer, is queued for the backend before they start (``queued``: its request
    id), so that the first generation starts it rather than the config applied before."""
    from .backendwait import backend_probe, ensure_backend
    from .daemons import ensure_daemons, queue_for_backend
    from .firstrun import ensure_release, place_first_release
    from .upwait import starting_daemons
    queued = None
    with _stop_deferred(args), starting_daemons(layout) as running:   # one `up` at a time
        if running:   # both answered it: nothing to place or start, nothing to ask again
            first, started = None, {"owner": False, "guardian": False}
        else:
            if config is not None:
                queued = queue_for_backend(layout, *config)["request_id"]
            spawning: set[str] = set()
            try:
                first = place_first_release(layout, args.release)   # fresh home: they run it
                started = ensure_daemons(layout, args.foreground, spawning=spawning)
            except KeyboardInterrupt:
                # once a daemon was spawned (detached), it may run and apply the config,
                # as Ctrl-C says; before, nothing ever will
                if queued is not None and not spawning:
                    from backend.queuefile import discard
                    discard(layout.queued_config, queued)
                raise
            except BaseException:   # nothing was started: nothing is left queued either
                if queued is not None:
                    from backend.queuefile import discard
                    discard(layout.queued_config, queued)
                raise
    deadline = time.monotonic() + args.timeout   # for the first backend, however it goes
    try:
        with _guardian(args) as g:
            release = ensure_release(layout, g, first or args.release, args.timeout)
        with live(args, "up", backend_probe(layout)):
            ensure_backend(layout, max(0.0, deadline - time.monotonic()), args.timeout,
                           kept=started["guardian"], granted=started["owner"])
    except TenureError as exc:
        if queued is not None:   # the daemons run: the backend that comes applies it
            exc.msg += (f"; the config stays queued as request {queued}: the backend "
                        "applies it once one runs (`tenure status` says whether it waits)")
            exc.data["request_id"] = queued
        raise
    result: dict[str, Any] = {"started": started, "release_sealed": release}
    if queued is not None:
        result["queued"] = queued
    if release is not None and first is None:   # daemons that ran before the release
        from .firstrun import move_to_first_release
        result["moved"] = move_to_first_release(
            layout, release, lambda: _guardian(args),
            lambda timeout: _api(args, timeout), args.timeout)
        with live(args, "up", backend_probe(layout)):
            ensure_backend(layout, args.timeout)
    return result


class _Stopped(BaseException):
    """SIGINT or SIGTERM to `up --foreground` before its wait began: like
    KeyboardInterrupt, no ``except Exception`` of the start takes it for its own."""


def _stop_on_signals(args: Any) -> None:
    """``up --foreground``: SIGINT, SIGTERM and SIGHUP (the terminal it runs in closed:
    it died of it, leaving tenure running with nobody to stop it) stop everything from
    the command's start.
    The first one raises _Stopped where the start is (cmd_up then runs the down); a
    later one only adds nothing. By default SIGTERM ended the command there, and Ctrl-C
    only its wait, either leaving what it started running. (Handlers, not a blocked
    mask: the daemons it starts would inherit a mask.)"""
    import signal  # here: the enum module costs every other command ~6 ms

    def stop(signum: int, _frame: Any) -> None:
        if getattr(args, "stopping", False):
            return
        if getattr(args, "deferring", False):
            args.deferred = True
            return
        args.stopping = True
        raise _Stopped()
    for sig in _stop_signals():
        signal.signal(sig, stop)


def _stop_signals() -> set[Any]:
    """What stops ``up --foreground``."""
    import signal
    return {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextmanager
def _stop_deferred(args: Any) -> Iterator[None]:
    """While the daemons are being started, a stop signal (up --foreground) waits until
    they answer: stopped half-way, a daemon spawned but not listening yet was invisible
    to the down that followed, and ran on after it."""
    args.deferring = True
    try:
        yield
    finally:
        args.deferring = False
    if getattr(args, "deferred", False) and not getattr(args, "stopping", False):
        args.stopping = True
        raise _Stopped()


@contextmanager
def _stop_signals_blocked() -> Iterator[set[Any]]:
    """The stop signals held pending (their set) until the block ends."""
    import signal
    both = _stop_signals()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, both)
    try:
        yield both
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _calm(args: Any) -> None:
    """Before the down: Ctrl-C's own handler back (a Ctrl-C during it interrupts the
    down, whose daemons go on stopping), SIGTERM left to the handler that now adds
    nothing (a second one, as from a service manager, does not kill the down half-way),
    and the stop signals already pending dropped, all while they are blocked."""
    import signal
    with _stop_signals_blocked() as both:
        args.stopping = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        while signal.sigtimedwait(both, 0) is not None:
            pass
        args.cmd = "down"   # an interruption from now on is the down's


def _foreground(args: Any) -> int:
    """Wait for SIGINT, SIGTERM or SIGHUP, then ``tenure down``. They are blocked while
    waited for (sigwait takes only a pending signal), and until the down is ready."""
    import signal
    with _stop_signals_blocked() as both:
        with suppress(OSError):
            print("tenure: running in the foreground; Ctrl-C stops everything",
                  file=sys.stderr)
        signal.sigwait(both)
        _calm(args)
    return cmd_down(args)


def _apply_text(args: Any, text: str, path: Any, timeout: float,
                wait: bool = True) -> dict[str, Any]:
    plan = _call(args, "plan", {"config_text": text, "source": str(path.absolute())})
    op = _call(args, "apply", {"plan": plan["id"]})
    if op.get("id") is not None and wait:
        op = waited(args, op, timeout, "up")
    return {"plan": plan, "operation": op}


def _queued_apply(args: Any, layout: Any, rid: str, wait: bool,
                  older: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """What became of the config ``up`` queued as request ``rid``, as _apply_text
    answers: once the backend took it (and, with ``wait``, once its operation ended).
    Raises its refusal (a rejected config is not kept: this command said it). A backend
    of an older release, which cannot tell (it applies the queue all the same), is
    answered by ``older()``: the plan and apply of before, which joins that."""
    from protocol.errors import UnknownMethod

    from .opwait import wait_queued
    deadline = time.monotonic() + args.timeout
    try:
        r = wait_queued(args, _call, rid, args.timeout, "up")
    except UnknownMethod:
        return older()
    if r["state"] == "rejected":
        from backend.queuefile import discard, files
        from protocol.errors import error_from_wire
        discard(files(layout.queued_config)[2], rid)
        raise error_from_wire(r["code"], r["msg"], {"request_id": rid})
    if r["state"] == "unknown":
        raise NotFound(f"the backend has no word of how the config queued as request {rid}"
                       " ended (the generation that took it ended, or a newer `tenure up "
                       "--no-wait` replaced it): `tenure events --kind queued-config` and "
                       "`tenure op list` tell", {"request_id": rid})
    op = r.get("operation") or {"id": None, "outcome": "no-change", "changes": []}
    if op.get("id") is not None and op.get("outcome") is None and wait:
        op = waited(args, op, max(0.0, deadline - time.monotonic()), "up")
    return {"plan": r.get("plan") or {"changes": op.get("changes", [])}, "operation": op,
            "request_id": rid}


def cmd_down(args: Any) -> int:
    from protocol.window import DOWN

    from .down import stop_all
    from .upwait import wait_background_start
    from .windowlock import held
    layout = _layout(args)
    with live(args, "down", _owner_probe(args)):
        wait_background_start(layout)
        with held(layout, DOWN):   # not in the middle of an owner window
            out = stop_all(layout)
    _out(args, out, render_changes.down(out))
    receipt = out.get("owner_receipt")
    clean = receipt is None or receipt["state"] == "clean"
    stopped = all(out.get(k, True) for k in ("guardian", "backend", "owner"))
    return OK if clean and stopped else ERROR


def _owner_probe(args: Any) -> Any:
    """``applications running 3`` from the owner, while it answers."""
    def probe() -> str:
        with Client(_layout(args).owner_sock, pin=False, allow_group=True,
                    timeout=2.0) as c:
            return f"applications running {c.call('status')['live']}"
    return probe
