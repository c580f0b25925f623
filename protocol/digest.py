"""Digests that two daemons compute independently and compare."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

__all__ = ["JOB_LAUNCH_PREFIX", "inventory_digest"]

JOB_LAUNCH_PREFIX = "job:"
"""Launch keys of job runs start with this (an app instance's never contain ':')."""


def inventory_digest(rows: Iterable[dict[str, Any]]) -> str:
    """sha256 of the sorted (launch key, pid, start ticks) of live app launches. The
    owner's inventory and a backend's view give the same digest exactly when they agree
    about the applications.

    Job runs are left out: the backend's job ledger records every job launch before the
    owner hears of it and a recovering generation settles each one from the owner's
    evidence, so a recovery certificate need not vouch for them — and one that did would
    almost never be valid while jobs come and go."""
    items = sorted((r["launch_key"], r["pid"], r["start_ticks"]) for r in rows
                   if r.get("pid") is not None
                   and not str(r["launch_key"]).startswith(JOB_LAUNCH_PREFIX))
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()
