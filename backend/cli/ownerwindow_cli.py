"""``tenure owner upgrade``'s command line: the plan as printed, a dry run, the command
itself and what it prints at the end. The window, its steps and its record are
backend.cli.ownerwindow's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from protocol.errors import (
    BadRequest,
    MaintenanceIncomplete,
    NotFound,
    OwnerUpgradeReverted,
    TenureError,
)
from protocol.layout import Layout

from .ownerplan import check_contracts_offered, check_release, plan
from .ownerwindow import (
    APPS_DOWN,
    TRANSITIONS,
    Event,
    Step,
    Window,
    begin,
    carry_on,
    check_way_back,
    failed_how,
    held,
    load,
    name,
    reverted,
)

__all__ = ["check_not_reverted", "command", "done_text", "dry_run", "plan_text"]


# -- the plan ------------------------------------------------------------------------------

def plan_text(p: dict[str, Any], release_arg: str | None) -> str:
    owner = p["owner"]
    src = f"release {p['from'][:12]}" if p["from"] else "the installed code"
    dst = f"release {p['release'][:12]}" if p["release"] else "the installed code"
    lines = [f"owner maintenance window ({p['mode']}): owner {owner['instance']} "
             f"(pid {owner['pid']}), {src} -> {dst}"]
    if p["stop"]:
        lines.append(f"stops {p['instances']} instances with their stop policies, in this "
                     "order:")
        lines += [f"  {i}. {' '.join(level)}" for i, level in enumerate(p["stop"], 1)]
        lines.append("then restarts the owner and starts the same instances again, last "
                     "stopped first.")
    else:
        lines.append("no instance runs: only the owner restarts")
    unfinished = p.get("unfinished")
    if unfinished:
        lines.insert(1, f"a maintenance window is unfinished (stopped after step "
                        f"{unfinished['step']}): tenure owner upgrade --continue finishes it"
                     + ("; a new window is refused until then"
                        if unfinished["step"] in APPS_DOWN else ""))
    if p["stopped_stacks"]:
        lines.append(f"stays stopped: {', '.join(p['stopped_stacks'])} (stack stopped)")
    lines.append(f"digest: {p['digest']}")
    arg = f"{p['release']} " if release_arg else ""   # the id: a path may change
    lines.append(f"to perform exactly this: tenure owner upgrade {arg}--digest {p['digest']}")
    return "\n".join(lines)


# -- the command -----------------------------------------------------------------------------

def command(args: Any, w: Window, guardian: Callable[..., Any],
            out: Callable[..., None]) -> int:
    """``tenure owner upgrade``: print the plan, or perform or continue a window."""
    from .exits import Exit
    modes = sum(bool(x) for x in (args.dry_run, args.digest, args.cont))
    if modes != 1:
        raise BadRequest("tenure owner upgrade [RELEASE|PATH] takes exactly one of "
                         "--dry-run, --digest D (the plan you reviewed) or --continue")
    release = None
    if args.release and args.cont:
        _check_continued_release(w.layout, args.release)
    if args.release and not args.cont:
        from .releases import resolve_release
        with guardian(args) as g:
            release = resolve_release(g, args.release, install=True)
    if args.dry_run:
        p = dry_run(w, release)
        out(args, p, plan_text(p, args.release))
        return Exit.OK
    with held(w.layout, "`tenure owner upgrade`"):
        if args.cont:
            rec = load(w.layout)
            if rec is None or rec["step"] == Step.DONE:
                raise NotFound("no maintenance window is unfinished")
        else:
            rec = begin(w, plan(w, release), args.digest)
        rec = carry_on(w, rec)
    check_not_reverted(rec)
    out(args, rec, done_text(rec))
    return Exit.OK


def _check_continued_release(layout: Layout, arg: str) -> None:
    """``RELEASE`` given with --continue must name the release the unfinished window
    plans (its id, a prefix of 8 or more characters, or its sealed directory): --continue
    carries on the recorded plan, never another. Raises BadRequest (nothing done);
    returns when it names it, or when no window is unfinished (--continue says so)."""
    rec = load(layout)
    if rec is None or rec["step"] == Step.DONE:
        return
    planned: str | None = rec["plan"]["release"]
    named = arg
    if "/" in arg or arg in (".", ".."):
        from guardian.manifest import RUNTIME_NAME, release_id
        try:
            named = release_id((Path(arg) / RUNTIME_NAME).read_bytes())
        except OSError:
            named = arg
    if planned is not None and len(named) >= 8 and planned.startswith(named):
        return
    raise BadRequest(
        f"{arg}: --continue carries on the unfinished window, which plans "
        f"{name(planned)} ({planned or 'no release'}), not another; nothing was done. "
        "Run `tenure owner upgrade --continue` without RELEASE to finish it, then plan "
        "a window of the release you meant", {"release": arg, "planned": planned})


def dry_run(w: Window, release: str | None) -> dict[str, Any]:
    """The plan, its release verified as the window would verify it before it stops
    anything, and ``unfinished`` (``{step, failed}`` of a window not done, or None).
    Raises what :func:`plan` and :func:`check_release` raise; MaintenanceIncomplete,
    pointing at --continue, when no plan can be made while a window is unfinished with
    instances down (between two owners none answers, and `tenure up` is refused)."""
    try:
        p = plan(w, release)
    except TenureError as exc:
        _refuse_unfinished(w.layout, exc)
        raise
    candidate = None if p["release"] is None else \
        check_release(w.layout, p["release"], p["owner_uid"])
    check_way_back(w.layout, p)
    if candidate is not None:
        check_contracts_offered(w.layout, p, candidate)
    rec = load(w.layout)
    unfinished = None if rec is None or rec["step"] == Step.DONE else \
        {"step": rec["step"], "failed": str(TRANSITIONS[Step(rec["step"]), Event.OK])}
    return {**p, "unfinished": unfinished}


def _refuse_unfinished(layout: Layout, exc: TenureError) -> None:
    """Raise MaintenanceIncomplete naming the unfinished window and --continue, with
    ``exc`` (why no plan could be made) in ``data.error``, when a window stopped after a
    step with instances down; else return."""
    rec = load(layout)
    if rec is None or rec["step"] not in APPS_DOWN:
        return
    step = Step(rec["step"])
    # no owner answers: plan's advice (`tenure up`) is refused while the window is
    # between two owners; --continue starts the next one
    why = "no owner answers on this home" if isinstance(exc, NotFound) else \
        exc.msg.rstrip()
    raise MaintenanceIncomplete(
        f"no plan: {why}; a maintenance window is unfinished (stopped after "
        f"step {step}): tenure owner upgrade --continue finishes it; a new window is "
        "refused until then", {"step": str(step), "failed": str(TRANSITIONS[step, Event.OK]),
                               "error": exc.to_wire()}) from None


def done_text(rec: dict[str, Any]) -> str:
    p, prog = rec["plan"], rec["progress"]
    runs = (prog.get("owner_release") or {}).get("running")
    return (f"owner maintenance window done: owner {prog['owner']['instance']} (pid "
            f"{prog['owner']['pid']}) runs "
            f"{'release ' + runs if runs else 'the installed code'}; "
            f"{p['instances']} instances stopped and started again"
            + (f"; still stopped: {', '.join(p['stopped_stacks'])}"
               if p["stopped_stacks"] else ""))


def check_not_reverted(rec: dict[str, Any]) -> None:
    """Raises OwnerUpgradeReverted when the window ``rec`` ended by going back (its new
    owner could not start, or the backend did not attach to it)."""
    if reverted(rec):
        raise OwnerUpgradeReverted(reverted_text(rec), _reverted_data(rec))


def reverted_text(rec: dict[str, Any]) -> str:
    p, prog = rec["plan"], rec["progress"]
    failure = prog["start_failure"]
    said = failure["last_lines"].rstrip("\n") or failure["error"]["msg"]
    where = (f"Why the backend did not attach to it: {failure['log']}; the wait ended "
             "with:" if failure.get("unserved") else
             f"The failed owner's own last lines, from {failure['log']}:")
    return (f"the owner of {name(p['release'])} {failed_how(failure)}, so the maintenance "
            f"window went back to {name(p['from'])}: owner {prog['owner']['instance']} "
            f"(pid {prog['owner']['pid']}) runs it and {p['instances']} instances were "
            f"started again and verified. Fix that release, then plan a new window. "
            f"{where}\n{said}")


def _reverted_data(rec: dict[str, Any]) -> dict[str, Any]:
    p, prog = rec["plan"], rec["progress"]
    failure = prog["start_failure"]
    return {"step": rec["step"], "outcome": rec["outcome"], "release": p["release"],
            "reverted_to": p["from"], "log": failure["log"], "error": failure["error"],
            "owner": prog["owner"], "pids": prog.get("pids", {})}
