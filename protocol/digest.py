"""Digests that two daemons compute independently and compare."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

__all__ = ["inventory_digest"]


def inventory_digest(rows: Iterable[dict[str, Any]]) -> str:
    """sha256 of the sorted (launch key, pid, start ticks) of live launches. The owner's
    inventory and a backend's view give the same digest exactly when they agree."""
    items = sorted((r["launch_key"], r["pid"], r["start_ticks"]) for r in rows
                   if r.get("pid") is not None)
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()
