"""``tenure top``: the instances using the most CPU or memory, redrawn in place.

Built on the backend's ``status`` answer: CPU% there is the rate between two successive
measurements of the same process by the owner, so the first frame is drawn from a second
answer taken a moment after a first one (``PRIME`` seconds, at most ``--every``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from backend.targets import order_key
from protocol.errors import TenureError

from .exits import current
from .present import colour_for, dur, paint, percent, size, table, value
from .watch import error_frame, redraw, view_height

__all__ = ["HEADER", "PRIME", "SORTS", "pick", "render", "run"]

HEADER = ["INSTANCE", "STATE", "CPU", "MEM", "RESTARTS", "UPTIME", "PID"]
PRIME = 1.0
SORTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "cpu": lambda a: (-(a.get("cpu_percent") or 0.0), -(a.get("rss") or 0),
                      order_key(a["key"])),
    "mem": lambda a: (-(a.get("rss") or 0), -(a.get("cpu_percent") or 0.0),
                      order_key(a["key"])),
    "name": lambda a: order_key(a["key"]),
}


def pick(status: dict[str, Any], sort: str, n: int | None) -> dict[str, Any]:
    """The snapshot ``top`` shows (and ``--json`` prints): the instances sorted by
    ``sort`` (``cpu``, ``mem`` descending; ``name``), the first ``n``, and totals over
    every instance. Pure."""
    apps = status.get("apps", [])
    rows = sorted(apps, key=SORTS[sort])[:n]
    cpu = _total(apps, "cpu_percent")
    return {"sort": sort, "instances": len(apps),
            "running": sum(1 for a in apps if a.get("pid") is not None),
            "cpu_percent": None if cpu is None else round(cpu, 1),
            "rss": _total(apps, "rss"),
            "owner_link": status.get("owner_link"),
            "apps": [{k: a.get(k) for k in ("key", "state", "pid", "cpu_percent", "rss",
                                            "restarts", "uptime")} for a in rows]}


def _total(apps: list[dict[str, Any]], key: str) -> Any:
    """The sum of ``key`` over the instances that have it; None (unknown, not 0) when
    instances run and none has it (the owner is out of reach, its figures not read, or
    each process was measured once only: no CPU rate yet)."""
    known = [a[key] for a in apps if a.get(key) is not None]
    if not known and any(a.get("pid") is not None for a in apps):
        return None
    return sum(known)


def render(snap: dict[str, Any], height: int | None = None) -> str:
    """A summary line, then one row per instance shown: with ``height`` (the lines
    the view may take on a terminal) the rows that fit and a ``(N more)`` line, so the
    summary and the first rows stay on the screen. Pure."""
    link = snap.get("owner_link") or {}
    head = (f"{snap['instances']} instances, {snap['running']} running; "
            f"cpu {percent(snap['cpu_percent'])}, mem {size(snap['rss'])}; "
            f"sorted by {snap['sort']}")
    if not link.get("current", True):
        head += "; " + paint(f"owner {link.get('state', 'lost')}: figures are not current",
                             "red")
    apps, more = _fit(snap["apps"], height)
    rows = [[a["key"], a["state"], percent(a["cpu_percent"]), size(a["rss"]),
             str(a["restarts"]), dur(a["uptime"]), value(a["pid"])] for a in apps]
    colours = [[None, colour_for(a["state"]), None, None, None, None, None] for a in apps]
    body = table(rows, HEADER, colours) if rows else \
        "no instances" if not snap["instances"] else "(-n 0: none shown)"
    if more:
        body = f"{body}\n({more} more)" if rows else f"({more} more)"
    return f"{head}\n{body}"


def _fit(apps: list[dict[str, Any]], height: int | None) -> tuple[list[dict[str, Any]], int]:
    """The rows of ``apps`` that fit in ``height`` lines under the summary line and the
    table's header, one of them then saying how many were left out; and that number."""
    if height is None or len(apps) <= height - 2:
        return apps, 0
    keep = max(0, height - 3)
    return apps[:keep], len(apps) - keep


def run(args: Any, status: Callable[[], dict[str, Any]],
        out: Callable[[dict[str, Any], str], None]) -> int:
    """Draw until Ctrl-C (``--once`` or ``--json``: one snapshot). On a terminal the
    screen is redrawn in place, the rows cut to its height; piped, each snapshot
    follows the last after a blank line, every row shown.
    A frame whose answer failed (no backend for a moment, a handoff) says why, and the
    next frame is drawn as usual. Returns 0, 5 when the last answer was not current, or
    the code of the last frame's error (watch.error_frame). Raises BadRequest for a
    negative ``-n``, and with one snapshot the API's errors."""
    if args.n is not None and args.n < 0:
        from protocol.errors import BadRequest
        raise BadRequest(f"-n {args.n}: give how many instances to show (0 or more)",
                         {"field": "n"})
    every = max(args.every, 0.2)
    once = args.once or args.json
    _prime(status, once)
    time.sleep(min(every, PRIME))

    def draw() -> int:
        try:
            answer = status()
        except TenureError as exc:   # a backend away a moment: say so, go on (as status -w)
            if once:
                raise
            return error_frame(exc, args.json)
        snap = pick(answer, args.sort, args.n)
        out(snap, render(snap, view_height() if tty else None))
        return current(answer)
    tty = sys.stdout.isatty() and not once
    return redraw("tenure top", every, tty, draw, once)


def _prime(status: Callable[[], dict[str, Any]], once: bool) -> None:
    """The first measurement (CPU% needs two). Raises the API's errors with ``once``;
    redrawing, an error is left to the first frame to show."""
    try:
        status()
    except TenureError:
        if once:
            raise
