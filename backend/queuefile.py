"""The queued-config file (backend.spool): its record and the three names it goes by, as
`tenure up` writes it and a backend generation takes it. Apart from the spool so that the
command line, which writes and removes these files, imports neither logging nor the
spool's state machine (logging is ~5 ms of a command's start here)."""

from __future__ import annotations

import os
import time
from typing import Any

from protocol.durable import atomic_write_json, read_json
from protocol.errors import StateCorrupt, TenureError
from protocol.schema import is_number

__all__ = ["KIND", "discard", "files", "pending", "queue", "read_queued", "state"]

KIND = "queued-config"


def queue(path: str, text: str, source: str) -> dict[str, Any]:
    """Queue ``text`` (read from ``source``) for the backend. Returns the record without
    the text. Raises OSError, UnsafePath (the path is a symlink)."""
    record = {"kind": KIND, "format": 1, "text": text, "source": source,
              "request_id": f"up-{os.urandom(8).hex()}", "queued_at": time.time()}
    atomic_write_json(path, record)
    return {k: v for k, v in record.items() if k != "text"}


def read_queued(path: str) -> dict[str, Any]:
    """The queued record at ``path``, validated. Raises FileNotFoundError, UnsafePath,
    StateCorrupt (not a queued config, or a field of the wrong type)."""
    rec = read_json(path, KIND)
    for key in ("text", "source", "request_id"):
        if not isinstance(rec.get(key), str) or (not rec[key] and key != "text"):
            raise StateCorrupt(f"{path}: {key} is not a non-empty string", {"path": path})
    at = rec.get("queued_at")
    if not (is_number(at) and 0 <= at < 1e12):   # not true, NaN or ±inf
        raise StateCorrupt(f"{path}: queued_at is not a time", {"path": path})
    return rec


def files(path: str) -> tuple[str, str, str]:
    """The queue at ``path``: its queued, taken and rejected files."""
    stem = path.removesuffix(".json")
    return path, f"{stem}.taken.json", f"{stem}.rejected.json"


def discard(name: str, request_id: str) -> bool:
    """Remove the queue file ``name`` (one of :func:`files`) when it holds request
    ``request_id``; another's, or one that cannot be read, is left. Returns whether."""
    try:
        if read_queued(name)["request_id"] != request_id:
            return False
        os.unlink(name)
    except (OSError, TenureError):
        return False
    return True


def pending(path: str) -> set[str]:
    """The request ids the queue at ``path`` holds (queued, or taken and not decided);
    a file that cannot be read names none."""
    out = set()
    for name in files(path)[:2]:
        try:
            out.add(read_queued(name)["request_id"])
        except (OSError, TenureError):
            continue
    return out


def state(path: str) -> str | None:
    """What `tenure status` says of the queue at ``path``: ``waiting`` (queued or being
    applied), ``rejected`` (set aside), None (nothing). Looks at names only."""
    queued, taken, rejected = files(path)
    if os.path.lexists(queued) or os.path.lexists(taken):
        return "waiting"
    return "rejected" if os.path.lexists(rejected) else None
