"""``tenure guardian status|upgrade``: the guardian's own release, and moving it."""

from __future__ import annotations

import time

from protocol.errors import BadRequest, GuardianUpgradeFailed
from protocol.procfs import running

from .daemons import ping
from .exits import Exit
from .progress import live
from .releases import resolve_release
from .render_backend import release_line

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from collections.abc import Callable
    from typing import Any

__all__ = ["guardian_command", "wait_moved"]


def guardian_command(args: Any, guardian: Callable[..., Any], layout: Any,
                     out: Callable[..., None]) -> int:
    with guardian(args) as g:
        if args.action == "status":
            st = g.call("status")
            out(args, _status_wire(st), status_text(st))
            return Exit.OK
        if not args.release:
            raise BadRequest("tenure guardian upgrade RELEASE: give a release id, a unique "
                             "prefix of one, or a sealed release directory (see `tenure "
                             "release list`)")
        rid = resolve_release(g, args.release, install=True)
        plan = g.call("guardian.upgrade", {"release": rid, "check": args.check},
                      timeout=args.timeout + 60)
    if not plan["restarting"]:
        out(args, plan, plan_text(plan))
        return Exit.OK
    with live(args, "guardian upgrade", lambda: "restarting"):
        st = wait_moved(layout, plan, args.timeout)
    done = {**plan, "guardian_release": st["guardian_release"],
            "guardian": st["guardian"], "backend_after": st.get("backend")}
    out(args, done, done_text(done))
    return Exit.OK


def wait_moved(layout: Any, plan: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The guardian's status once a new instance answers and has confirmed the release.
    Raises GuardianUpgradeFailed when it came back on other code, or never came back."""
    deadline = time.monotonic() + timeout
    before = plan["guardian"]["instance"]
    st = None
    pid, ticks = plan["guardian"]["pid"], plan["guardian"]["start_ticks"]
    while time.monotonic() < deadline:
        st = ping(layout.guardian_sock, home=layout.home)
        if st is None and not running(pid, ticks):
            raise GuardianUpgradeFailed(
                f"the guardian (pid {pid}) exited before it confirmed release "
                f"{plan['release']}; started again (`tenure up`, or by systemd) it goes "
                "back to the release it ran before", {"pid": pid})
        if st is not None and st["guardian"]["instance"] != before:
            own = st.get("guardian_release") or {}
            if own.get("running") != plan["release"]:
                raise GuardianUpgradeFailed(
                    "the guardian came back without moving to release "
                    f"{plan['release']}: {_why(own)}", {"guardian_release": own})
            if own.get("state") == "selected":
                return st
        time.sleep(0.1)
    raise GuardianUpgradeFailed(
        f"the guardian did not confirm release {plan['release']} within {timeout:.0f} s; "
        "`tenure guardian status` shows where it stands",
        {"guardian_release": (st or {}).get("guardian_release")})


def _why(own: dict[str, Any]) -> str:
    err = own.get("error") or {}
    reverted = own.get("reverted") or {}
    return str(err.get("msg") or reverted.get("reason") or "see the guardian's log")


def _status_wire(st: dict[str, Any]) -> dict[str, Any]:
    return {"guardian": st["guardian"], "guardian_release": st.get("guardian_release"),
            "handoff_in_progress": st.get("handoff_in_progress")}


def status_text(st: dict[str, Any]) -> str:
    g = st["guardian"]
    return (f"guardian pid {g['pid']} (instance {g['instance']})\n"
            f"  runs {release_line(st.get('guardian_release'))}")


def plan_text(plan: dict[str, Any]) -> str:
    if not plan["changed"]:
        return f"the guardian already runs release {plan['release']}; nothing to do"
    pre = plan["preflight"]
    backend = plan.get("backend")
    kept = (f"backend generation {backend['activation']} (pid {backend['pid']}) keeps "
            "running" if backend else "no backend generation runs")
    return "\n".join([
        f"guardian upgrade to release {plan['release']}: checks passed",
        f"  from: {'release ' + plan['from'] if plan['from'] else 'the installed code'}",
        f"  preflight: {pre.get('elapsed')} s (Python {pre.get('python')})",
        f"  guardian pid {plan['guardian']['pid']} stays; {kept}; applications are not "
        "touched",
        f"run it with: tenure guardian upgrade {plan['release']}"])


def done_text(done: dict[str, Any]) -> str:
    before, after = done.get("backend"), done.get("backend_after")
    if before and after and after.get("pid") == before.get("pid"):
        backend = f"backend generation {before['activation']} kept (pid {before['pid']})"
    elif after:
        backend = f"backend generation {after['activation']} (pid {after['pid']})"
    else:
        backend = "no backend generation runs"
    return (f"the guardian now runs release {done['release']} (pid "
            f"{done['guardian']['pid']}, instance {done['guardian']['instance']}); "
            f"{backend}")
