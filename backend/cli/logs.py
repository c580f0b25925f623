"""``tenure logs``: read the owner's journal through the backend, page by page.

Pages are bounded by the owner (a record count and a byte budget) and printed as they
come, so ``-n 100000`` of long lines never holds more than a page. On a terminal, control
characters in application output (escape sequences, carriage returns) are shown as
``\\xNN`` instead of being interpreted: an app must not be able to move the cursor,
recolour, retitle or rewrite what the operator sees.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from protocol.errors import BadRequest

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["follow_logs", "neutralise"]

STREAM_MARK = {"stdout": "", "stderr": " (stderr)"}
PAGE_RECORDS = 10_000
FOLLOW_POLL_S = 0.2

# C0 controls but TAB, DEL, and C1 controls (a decoded 0x9b is CSI on many terminals).
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}


def neutralise(text: str) -> str:
    """``text`` with every terminal control character written out as ``\\xNN``."""
    return text.translate(_CONTROLS)


def _filters(target: str | None) -> dict[str, Any]:
    """``stack``, ``stack/app`` or ``stack/app/N`` → journal filters. Raises BadRequest."""
    if not target:
        return {}
    parts = target.split("/")
    if len(parts) > 3 or not all(parts):
        raise BadRequest(f"{target!r} is not STACK, STACK/APP or STACK/APP/N")
    out: dict[str, Any] = {"stack": parts[0]}
    if len(parts) > 1:
        out["app"] = parts[1]
    if len(parts) > 2:
        if not parts[2].isdigit():
            raise BadRequest(f"instance {parts[2]!r} in {target!r} is not a number")
        out["instance"] = int(parts[2])
    return out


def _print(args: Any, recs: list[dict[str, Any]], tty: bool) -> None:
    import json
    out = sys.stdout
    for r in recs:
        data = r["data"].decode(errors="replace")
        if args.json:
            out.write(json.dumps({**r, "data": data}) + "\n")
        else:
            if tty:
                data = neutralise(data)
            out.write(f"{r['stack']}/{r['app']}/{r['instance']}"
                      f"{STREAM_MARK.get(r['stream'], '')}: {data}\n")
    out.flush()


def follow_logs(args: Any, call: Callable[..., Any]) -> int:
    """Print the last ``args.n`` records (or those after ``args.since``), then, with
    ``args.follow``, every new one. Without it, stops at the journal's end as it was
    when the command started. Raises what ``call`` raises."""
    flt = {**_filters(args.target), **({"stream": args.stream} if args.stream else {})}
    tty = not args.json and sys.stdout.isatty()
    start = {"after": args.since} if args.since is not None else {"tail": max(args.n, 0)}
    page = call(args, "logs", {**flt, **start, "limit": PAGE_RECORDS})
    end = page["last_id"]
    while True:
        recs = page["records"]
        if not args.follow and recs and recs[-1]["id"] > end:
            _print(args, [r for r in recs if r["id"] <= end], tty)
            return 0
        _print(args, recs, tty)
        if not page["more"]:
            if not args.follow:
                return 0
            time.sleep(FOLLOW_POLL_S)
        page = call(args, "logs", {**flt, "after": page["next"], "limit": PAGE_RECORDS})
