"""``tenure plan``, ``apply``, ``op`` and ``stack``: a config planned and applied, an
operation shown or waited for, a stack stopped or started. ``tenure up`` applies its
config with the same parts (:func:`parse_here`, :func:`waited`, :func:`settle_probe`).
"""

from __future__ import annotations

from backend.configfile import read_config_text
from protocol.errors import BackendUnavailable, BadRequest
from protocol.startup import import_msgspec_as_released

from . import render_changes
from .everyday import api as _api
from .everyday import call as _call
from .everyday import out as _out
from .exits import Exit
from .progress import live

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["OP_TIMEOUT", "cmd_apply", "cmd_op", "cmd_plan", "cmd_stack", "parse_here",
           "settle_probe", "waited"]

OK, ERROR, UNSETTLED = Exit.OK, Exit.ERROR, Exit.UNSETTLED


def parse_here(text: str, source: str) -> None:
    """Parse a config here, as the backend would. Raises ConfigInvalid."""
    import_msgspec_as_released()   # as the backend that parses it again does
    from backend.config import check_declares_something, parse_config
    check_declares_something(parse_config(text, source))


def cmd_plan(args: Any) -> int:
    """A plan is the backend's (it compares with what runs); without one, the config is
    still parsed here, so what is wrong in it is said at once, as CONFIG_INVALID."""
    text = read_config_text(args.config)
    source = str(args.config.absolute())
    try:
        plan = _call(args, "plan", {"config_text": text, "source": source})
    except BackendUnavailable as exc:
        parse_here(text, source)
        raise BackendUnavailable(f"{exc.msg}. {args.config} parses; a plan compares it "
                                 "with what runs, which needs the backend", exc.data) from None
    _out(args, plan, render_changes.plan(plan))
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
        op = waited(args, op, timeout, "apply")
        _out(args, op, render_changes.operation(op))
        return _op_exit(op)
    _out(args, op, render_changes.operation(op))
    return OK if op.get("outcome") in (None, "success", "no-change") else ERROR


def _op_exit(op: dict[str, Any]) -> int:
    """An operation waited for: still running (the wait timed out), ended well, or not."""
    if op.get("outcome") is None:
        return UNSETTLED
    return OK if op["outcome"] in ("success", "no-change") else ERROR


def waited(args: Any, op: dict[str, Any], timeout: float, what: str) -> dict[str, Any]:
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
        _out(args, r, render_changes.operations(r["operations"]))
        return OK
    if not args.id:
        raise BadRequest(f"tenure op {args.action} ID: give an operation id")
    if args.action == "show" and args.wait:
        r = _wait_op(args, args.id, timeout, "op show")
        _out(args, r, render_changes.operation(r))
        return _op_exit(r)
    r = _call(args, "op.show" if args.action == "show" else "op.abandon", {"id": args.id})
    _out(args, r, render_changes.operation(r))
    return OK


def cmd_stack(args: Any) -> int:
    if args.action == "start":
        if args.dry_run or args.digest:   # accepted by the parser for stop: never ignored
            raise BadRequest("tenure stack start takes no --dry-run or --digest (they "
                             "review a stop); `tenure status` shows what would start",
                             {"field": "dry_run" if args.dry_run else "digest"})
        with live(args, f"stack start {args.stack}", settle_probe(args, args.stack)):
            r = _call(args, "stack.start", {"stack": args.stack})
    else:
        with live(args, f"stack stop {args.stack}",
                  settle_probe(args, args.stack, "stopped")):
            r = _call(args, "stack.stop", {"stack": args.stack, "dry_run": args.dry_run,
                                           "digest": args.digest})
    _out(args, r, render_changes.stack(r))
    return OK


def settle_probe(args: Any, stack: str | None = None, want: str = "ready") -> Any:
    """How many instances (of ``stack``) are ``want``: ``apps ready 7/12``."""
    def probe() -> str:
        with _api(args, timeout=5.0) as c:
            apps = [a for a in c.call("status")["apps"]
                    if stack is None or a["stack"] == stack]
        done = sum(a["state"] == want for a in apps)
        return f"apps {want} {done}/{len(apps)}"
    return probe
