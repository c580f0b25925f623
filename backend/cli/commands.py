"""One function per ``tenure`` command: ``cmd_<name>(args) -> exit status``."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager, suppress

from backend.configfile import read_config_text
from protocol.client import Client
from protocol.errors import (
    BackendUnavailable,
    BadRequest,
    ConnectFailed,
    NotFound,
    RequestTimedOut,
    TenureError,
)
from protocol.startup import import_msgspec_as_released, use_builtin_hashes

from . import render
from .everyday import api as _api
from .everyday import call as _call
from .everyday import guardian as _guardian
from .everyday import layout as _layout
from .everyday import out as _out
from .exits import Exit, current
from .progress import live, said_if_stopped
from .releases import cli_against, resolve_release

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from collections.abc import Callable, Iterator
    from typing import Any

OK, ERROR, UNREACHABLE, UNSETTLED = Exit.OK, Exit.ERROR, Exit.UNREACHABLE, Exit.UNSETTLED


# -- lifecycle ------------------------------------------------------------------------

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
        _out(args, queued, render.up_queued(queued))
        return OK
    result = _up_daemons(args, layout, None if text is None else
                         (text, str(args.config.absolute())))
    if text is not None:
        with live(args, "up", _settle_probe(args)):
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
            _out(args, result, render.up(result) + "\n" + render.status(status))
        return _foreground(args)
    _out(args, result, render.up(result) + "\n" + render.status(status))
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
            _parse_here(text, str(args.config.absolute()))
        if early is None:
            return text, None
        from .background import start_queued
        return text, start_queued(layout, early, text, None if text is None else
                                  str(args.config.absolute()))
    finally:
        if early is not None:
            early.cancel()   # nothing is started unless start_queued said go


def _parse_here(text: str, source: str) -> None:
    """Parse a config here, as the backend would. Raises ConfigInvalid."""
    import_msgspec_as_released()   # as the backend that parses it again does
    from backend.config import check_declares_something, parse_config
    check_declares_something(parse_config(text, source))


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
        op = _waited(args, op, timeout, "up")
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
        op = _waited(args, op, max(0.0, deadline - time.monotonic()), "up")
    return {"plan": r.get("plan") or {"changes": op.get("changes", [])}, "operation": op,
            "request_id": rid}


def _waited(args: Any, op: dict[str, Any], timeout: float, what: str) -> dict[str, Any]:
    """Operation ``op``, as apply answered it, once it ended (or ``timeout`` passed); one
    apply joined (already applying the plan's config: nothing admitted) stays marked
    ``joined``, so what is printed says whose operation it waited for."""
    ended = _wait_op(args, op["id"], timeout, what)
    return {**ended, "joined": True} if op.get("joined") else ended


def _wait_op(args: Any, op_id: str, timeout: float, what: str) -> dict[str, Any]:
    """The operation once it ended (or ``timeout`` passed), asked of whichever backend
    generation serves: a handoff meanwhile is waited out (opwait.wait_op)."""
    from .opwait import wait_op
    return wait_op(args, _call, op_id, timeout, what)


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
    _out(args, out, render.down(out))
    receipt = out.get("owner_receipt")
    clean = receipt is None or receipt["state"] == "clean"
    stopped = all(out.get(k, True) for k in ("guardian", "backend", "owner"))
    return OK if clean and stopped else ERROR


# -- everyday -------------------------------------------------------------------------

def _target_cmd(args: Any, method: str) -> int:
    r = _call(args, method, {"target": args.target, "timeout": args.timeout},
              timeout=args.timeout + 30)
    _out(args, r, render.instances(r))
    if method != "stop" and render.failed_instances(r):
        return ERROR   # it gave up: a script's `tenure start x && next` must not go on
    return OK if r.get("settled", True) else UNSETTLED


def cmd_start(args: Any) -> int:
    return _target_cmd(args, "start")


def cmd_stop(args: Any) -> int:
    return _target_cmd(args, "stop")


def cmd_restart(args: Any) -> int:
    return _target_cmd(args, "restart")


def cmd_inspect(args: Any) -> int:
    r = _call(args, "inspect", {"target": args.target})
    _out(args, r, render.inspect(r))
    return current(r)


def cmd_metrics(args: Any) -> int:
    from .render_metrics import metrics
    r = _call(args, "metrics", {})
    _out(args, r, metrics(r))
    return OK


def cmd_top(args: Any) -> int:
    from .top import run
    return run(args, lambda: _call(args, "status", timeout=10.0),
               lambda snap, text: _out(args, snap, text))


def cmd_logs(args: Any) -> int:
    from .logs import follow_logs
    from .offline_logs import Fallback, FollowEnded
    try:
        return follow_logs(args, Fallback(_call, _layout(args)))
    except FollowEnded:   # tenure is not running: the file was read to its end
        return OK


def cmd_events(args: Any) -> int:
    from .events import follow_events
    return follow_events(args, _call)


# -- plans and operations -------------------------------------------------------------

def cmd_plan(args: Any) -> int:
    """A plan is the backend's (it compares with what runs); without one, the config is
    still parsed here, so what is wrong in it is said at once, as CONFIG_INVALID."""
    text = read_config_text(args.config)
    source = str(args.config.absolute())
    try:
        plan = _call(args, "plan", {"config_text": text, "source": source})
    except BackendUnavailable as exc:
        _parse_here(text, source)
        raise BackendUnavailable(f"{exc.msg}. {args.config} parses; a plan compares it "
                                 "with what runs, which needs the backend", exc.data) from None
    _out(args, plan, render.plan(plan))
    return OK


OP_TIMEOUT = 3600.0   # --wait's default for apply and op show


def _wait_timeout(args: Any, what: str) -> float:
    """The --timeout of a command that waits only with --wait: refused without it (it
    would mean nothing)."""
    if args.timeout is not None and not args.wait:
        raise BadRequest(f"{what}: --timeout goes with --wait", {"field": "timeout"})
    return OP_TIMEOUT if args.timeout is None else float(args.timeout)


def cmd_apply(args: Any) -> int:
    timeout = _wait_timeout(args, "tenure apply")
    op = _call(args, "apply", {"plan": args.plan, "request_id": args.request_id})
    if args.wait and op.get("id"):
        op = _waited(args, op, timeout, "apply")
        _out(args, op, render.operation(op))
        return _op_exit(op)
    _out(args, op, render.operation(op))
    return OK if op.get("outcome") in (None, "success", "no-change") else ERROR


def _op_exit(op: dict[str, Any]) -> int:
    """An operation waited for: still running (the wait timed out), ended well, or not."""
    if op.get("outcome") is None:
        return UNSETTLED
    return OK if op["outcome"] in ("success", "no-change") else ERROR


def cmd_op(args: Any) -> int:
    if args.action != "show" and args.wait:
        raise BadRequest(f"tenure op {args.action} takes no --wait (op show does)",
                         {"field": "wait"})
    if args.action != "list" and args.open:
        raise BadRequest(f"tenure op {args.action} takes no --open (op list does)",
                         {"field": "open"})
    timeout = _wait_timeout(args, f"tenure op {args.action}")
    if args.action == "list":
        if args.id:
            raise BadRequest(f"tenure op list takes no id (got {args.id!r}); `tenure op "
                             "show ID` shows one", {"field": "id"})
        r = _call(args, "op.list", {"open": True} if args.open else {})
        _out(args, r, render.operations(r["operations"]))
        return OK
    if not args.id:
        raise BadRequest(f"tenure op {args.action} ID: give an operation id")
    if args.action == "show" and args.wait:
        r = _wait_op(args, args.id, timeout, "op show")
        _out(args, r, render.operation(r))
        return _op_exit(r)
    r = _call(args, "op.show" if args.action == "show" else "op.abandon", {"id": args.id})
    _out(args, r, render.operation(r))
    return OK


def cmd_stack(args: Any) -> int:
    if args.action == "start":
        if args.dry_run or args.digest:   # accepted by the parser for stop: never ignored
            raise BadRequest("tenure stack start takes no --dry-run or --digest (they "
                             "review a stop); `tenure status` shows what would start",
                             {"field": "dry_run" if args.dry_run else "digest"})
        with live(args, f"stack start {args.stack}", _settle_probe(args, args.stack)):
            r = _call(args, "stack.start", {"stack": args.stack})
    else:
        with live(args, f"stack stop {args.stack}",
                  _settle_probe(args, args.stack, "stopped")):
            r = _call(args, "stack.stop", {"stack": args.stack, "dry_run": args.dry_run,
                                           "digest": args.digest})
    _out(args, r, render.stack(r))
    return OK


# -- guardian -------------------------------------------------------------------------

def cmd_backend(args: Any) -> int:
    if args.config is not None and args.action != "recover":
        raise BadRequest(f"tenure backend {args.action} takes no --config (`tenure backend "
                         "recover --config FILE` does)", {"field": "config"})
    if args.action == "prune":
        r = _call(args, "retention.run", {})
        missed = r.get("not_pruned") or {}   # an older backend does not say
        _out(args, r, render.pruned(r["deleted"], r["policy"], missed))
        return ERROR if missed else OK
    with _guardian(args) as g:
        if args.action == "status":
            r = g.call("status")
            _why_silent(r.get("backend"))
            r["recovery"] = _uncertifiable(args, r, render.recovery_state(r))
            owner = _owner_status(args)
            r["owner_release"] = None if owner is None else owner.get("release")
            r["owner_epoch"] = None if owner is None else owner.get("epoch")
            r["cli"] = cli_against(_layout(args), (r.get("selector") or {}).get("current"))
        elif args.action == "upgrade":
            if not args.release:
                raise BadRequest("tenure backend upgrade RELEASE: give a release id, a "
                                 "unique prefix of one, or a sealed release directory "
                                 "(see `tenure release list`)")
            rid = resolve_release(g, args.release, install=True)
            with live(args, "upgrade", _activation_probe(args)), \
                    said_if_stopped("guardian", _peer(g)):
                r = g.call("upgrade", {"release": rid, "check": args.check})
        elif args.action == "recover":
            params = {"force": args.force, "dry_run": args.dry_run,
                      **({"digest": args.digest} if args.digest else {})}
            given = _queue_given(args, g)
            try:
                with live(args, "recover", _activation_probe(args)), \
                        said_if_stopped("guardian", _peer(g)):
                    r = g.call("recover", params)
            except BaseException as exc:   # an interrupt too: nothing of it stays queued
                _withdraw(args, given, exc)
                raise
            if args.dry_run:
                _out(args, r, render.recover_plan(r))
                return OK
        else:
            with live(args, args.action, _activation_probe(args)), \
                    said_if_stopped("guardian", _peer(g)):
                r = g.call(args.action)
    _out(args, r, render.backend(args.action, r))
    act = r.get("activation") if isinstance(r, dict) else None
    if isinstance(act, dict) and act.get("outcome") not in (None, "success", "check-only"):
        return ERROR
    return current(r) if args.action == "status" else OK


def _why_silent(b: dict[str, Any] | None) -> None:
    """A living backend the guardian finds not answering: ``process``, what /proc says
    of it (stopped: with the kill -CONT that continues it), as `tenure status` says."""
    from .render_backend import not_answering, why_silent
    if b is not None and not_answering(b) is not None:
        b["process"] = why_silent(b.get("pid"))


def _peer(client: Client) -> Any:
    """The pid of the daemon ``client`` talks to, once it connected (None before)."""
    return lambda: client.welcome.identity.pid if client.welcome is not None else None


def _queue_given(args: Any, guardian: Client) -> str | None:
    """`backend recover --config FILE`: the config, read and parsed here, queued for the
    generation the recovery starts (backend.configrestore); its request id. Refused
    before anything is queued while a backend runs (its spool would apply the file:
    there is nothing to recover, and `tenure up --config` applies a config) or another
    config waits in the queue (it would be replaced, and withdrawn with ours)."""
    if args.config is None:
        return None
    if args.dry_run:
        raise BadRequest("--config is for a recovery, not its --dry-run: the plan does "
                         "not depend on it", {"field": "config"})
    if (guardian.call("status").get("backend") or {}).get("alive"):
        raise BadRequest("a backend generation runs: there is nothing to recover, and "
                         "`tenure up --config FILE` applies a config", {"field": "config"})
    layout = _layout(args)
    from backend.queuefile import files
    waiting = [f for f in files(layout.queued_config)[:2] if os.path.lexists(f)]
    if waiting:   # queued, or taken by a generation that did not decide it
        raise BadRequest(f"a config is queued already ({waiting[0]}); `tenure status` "
                         "says what becomes of it", {"field": "config"})
    from .daemons import queue_for_backend
    text = read_config_text(args.config)
    _parse_here(text, str(args.config.absolute()))
    return str(queue_for_backend(layout, text, str(args.config.absolute()))["request_id"])


def _withdraw(args: Any, given: str | None, exc: BaseException) -> None:
    """The config a refused or interrupted recovery was given, taken out of the queue
    again: nothing of it is applied later, by whatever backend comes next."""
    if given is None:
        return
    from backend.queuefile import discard
    if discard(_layout(args).queued_config, given) and isinstance(exc, TenureError):
        exc.msg += f"; {args.config} was not kept for a later backend"


def _uncertifiable(args: Any, r: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Recovery ``state`` as the guardian's status ``r`` gives it, made ``unavailable``
    when the backend says its storage refuses the recovery certificate (a full disk):
    the guardian's view alone reads "pending, certifies again within 5 s", or "ready"
    for the last certificate written, which no longer vouches for what runs once an
    app exited meanwhile (a recovery then blocks). The backend is asked only when that
    view is pending or ready; ``state`` stays when it does not answer or say (an older
    one)."""
    if state["state"] not in ("pending", "ready") or \
            not (r.get("backend") or {}).get("alive"):
        return state
    try:
        with _api(args, timeout=2.0) as c:
            failing = c.call("generation.status").get("certificate_error")
    except TenureError:
        return state
    return render.uncertifiable(failing) if isinstance(failing, dict) else state


def _owner_status(args: Any) -> dict[str, Any] | None:
    """The owner's status (the release it runs, ``{running, error}``, absent from one
    that predates saying it; its epoch), or None when it does not answer."""
    from .daemons import ping
    return ping(_layout(args).owner_sock, home=args.home)


def _activation_probe(args: Any) -> Any:
    """What the guardian is doing now: ``upgrade 20261201T…: draining``."""
    def probe() -> str | None:
        with _guardian(args, timeout=5.0) as g:
            act = g.call("status").get("last_activation") or {}
        return f"{act.get('kind')} {act.get('phase')}" if act else None
    return probe


def _owner_probe(args: Any) -> Any:
    """``applications running 3`` from the owner, while it answers."""
    def probe() -> str:
        with Client(_layout(args).owner_sock, pin=False, allow_group=True,
                    timeout=2.0) as c:
            return f"applications running {c.call('status')['live']}"
    return probe


def _settle_probe(args: Any, stack: str | None = None, want: str = "ready") -> Any:
    """How many instances (of ``stack``) are ``want``: ``apps ready 7/12``."""
    def probe() -> str:
        with _api(args, timeout=5.0) as c:
            apps = [a for a in c.call("status")["apps"]
                    if stack is None or a["stack"] == stack]
        done = sum(a["state"] == want for a in apps)
        return f"apps {want} {done}/{len(apps)}"
    return probe


def cmd_release(args: Any) -> int:
    from .releases import release_command
    return release_command(args, _guardian, _out)


def cmd_guardian(args: Any) -> int:
    from .guardiancmd import guardian_command
    return guardian_command(args, _guardian, _layout(args), _out)


def cmd_service(args: Any) -> int:
    from .service import service_command
    return service_command(args, _out)


def cmd_job(args: Any) -> int:
    from .jobs import job_command
    return job_command(args, _call, _out)


def cmd_import(args: Any) -> int:
    from .imports import import_command
    return import_command(args, _out)


# what each `owner` action takes: any other option given is refused, not ignored (a
# `reconcile --drain D --dry-run` stopped the processes it was meant to only show)
_OWNER_OPTIONS = {"upgrade": {"release", "dry_run", "digest", "cont"},
                  "reconcile": {"prepare", "drain"}, "status": set()}
_OWNER_FLAGS = {"release": "RELEASE", "dry_run": "--dry-run", "digest": "--digest",
                "cont": "--continue", "prepare": "--prepare", "drain": "--drain"}


def _check_owner_options(args: Any) -> None:
    """Raises BadRequest (nothing done) for an option ``args.action`` does not take."""
    given = [name for name in _OWNER_FLAGS if getattr(args, name, None) not in (None, False)]
    wrong = [_OWNER_FLAGS[n] for n in given if n not in _OWNER_OPTIONS[args.action]]
    if wrong:
        raise BadRequest(f"{', '.join(wrong)}: not an option of `tenure owner "
                         f"{args.action}`; nothing was done", {"options": wrong})
    if args.prepare and args.drain:
        raise BadRequest("--prepare and --drain: one or the other; nothing was done",
                         {"options": ["--prepare", "--drain"]})


def cmd_owner(args: Any) -> int:
    import subprocess
    _check_owner_options(args)
    if args.action == "upgrade":
        from .ownerwindow import Window
        from .ownerwindow_cli import command
        w = Window(_layout(args), lambda timeout: _api(args, timeout), args.timeout,
                   lambda line: None if args.json else print(f"  {line}", file=sys.stderr))
        return command(args, w, _guardian, _out)
    if args.action == "reconcile":
        cmd = [sys.executable, "-I", "-m", "owner", "reconcile", "--home", str(args.home)]
        cmd += ["--prepare"] if args.prepare else []
        cmd += ["--drain", args.drain] if args.drain else []
        return subprocess.call(cmd + (["--json"] if args.json else []))
    sock = _layout(args).owner_sock
    try:
        with Client(sock, pin=False, allow_group=True) as c:
            r = c.call("status")
    except (ConnectFailed, RequestTimedOut) as exc:
        from .holders import silent_listener
        raise silent_listener(sock, "owner") or exc from None
    _out(args, r, render.owner(r))
    return OK


def cmd_completion(args: Any) -> int:
    from .cmdline import parser
    from .completion import script
    sys.stdout.write(script(parser(), args.shell))
    return OK


def cmd___complete(args: Any) -> int:
    """Live targets for the completion script: quick, silent, never an error."""
    from .completion import targets
    try:
        with _api(args, timeout=1.0) as c:
            names = targets(c.call("status"))
    except (TenureError, OSError):
        return OK
    sys.stdout.write("".join(f"{n}\n" for n in names))
    return OK
