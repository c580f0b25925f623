"""``tenure logs``: read the owner's journal through the backend, optionally following."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["follow_logs"]

STREAM_MARK = {"stdout": "", "stderr": " (stderr)"}


def _filters(target: str | None) -> dict[str, Any]:
    if not target:
        return {}
    parts = target.split("/")
    out: dict[str, Any] = {"stack": parts[0]}
    if len(parts) > 1:
        out["app"] = parts[1]
    if len(parts) > 2:
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


def follow_logs(args: Any, call: Callable[..., Any]) -> int:
    flt = {**_filters(args.target), **({"stream": args.stream} if args.stream else {})}
    if args.since is not None:
        after = args.since
    else:
        last = call(args, "logs", {"after": 0, "limit": 1, **flt})["last_id"]
        after = max(0, last - max(args.n, 0) * 4)  # a window; trimmed to -n below
    recs: list[dict[str, Any]] = []
    while batch := call(args, "logs", {"after": after, "limit": 10_000, **flt})["records"]:
        recs += batch
        after = batch[-1]["id"]
    _print(args, recs if args.since is not None else recs[-args.n:] if args.n else [])
    while args.follow:
        batch = call(args, "logs", {"after": after, "limit": 10_000, **flt})["records"]
        if batch:
            _print(args, batch)
            after = batch[-1]["id"]
        else:
            time.sleep(0.2)
    return 0
