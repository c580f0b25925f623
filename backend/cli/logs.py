"""``tenure logs``: read the owner's journal through the backend, optionally following."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from protocol.errors import BadRequest

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["follow_logs"]

STREAM_MARK = {"stdout": "", "stderr": " (stderr)"}


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


def _print(args: Any, recs: list[dict[str, Any]]) -> None:
    import json
    out = sys.stdout
    for r in recs:
        data = r["data"].decode(errors="replace")
        if args.json:
            out.write(json.dumps({**r, "data": data}) + "\n")
        else:
            out.write(f"{r['stack']}/{r['app']}/{r['instance']}"
                      f"{STREAM_MARK.get(r['stream'], '')}: {data}\n")
    out.flush()


def _read_all(args: Any, call: Callable[..., Any], after: int, flt: dict[str, Any]
              ) -> tuple[list[dict[str, Any]], int]:
    recs: list[dict[str, Any]] = []
    while batch := call(args, "logs", {"after": after, "limit": 10_000, **flt})["records"]:
        recs += batch
        after = batch[-1]["id"]
    return recs, after


def _last_n(args: Any, call: Callable[..., Any], flt: dict[str, Any], n: int
            ) -> tuple[list[dict[str, Any]], int]:
    """The last ``n`` matching records: look back over a window that grows until it
    holds ``n`` of them or reaches the start of the journal."""
    last = call(args, "logs", {"after": 0, "limit": 1})["last_id"]
    window = max(n, 1) * 4
    while True:
        start = max(0, last - window)
        recs, after = _read_all(args, call, start, flt)
        if len(recs) >= n or start == 0:
            return recs[-n:] if n else [], max(after, last)
        window *= 8


def follow_logs(args: Any, call: Callable[..., Any]) -> int:
    flt = {**_filters(args.target), **({"stream": args.stream} if args.stream else {})}
    if args.since is not None:
        recs, after = _read_all(args, call, args.since, flt)
    else:
        recs, after = _last_n(args, call, flt, max(args.n, 0))
    _print(args, recs)
    while args.follow:
        batch = call(args, "logs", {"after": after, "limit": 10_000, **flt})["records"]
        if batch:
            _print(args, batch)
            after = batch[-1]["id"]
        else:
            time.sleep(0.2)
    return 0
