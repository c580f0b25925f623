"""What the guardian keeps: how many finished activations (``[retention] activations``
of the applied tenure.toml, read from backend.db, read only; 1,000 when unset or
unreadable), and the newest handoff records, checkpoints and backend logs.

The guardian is mechanism only and does not parse configs beyond this one number: the
backend validated the config before applying it (backend/config_retention.py).
"""

from __future__ import annotations

import logging
import os
import sqlite3

from protocol.durable import read_rows
from protocol.errors import TenureError, UnsafePath

from .paths import GuardianPaths
from .state import StateStore

__all__ = ["DEFAULT_ACTIVATIONS", "activations_to_keep", "prune_artifacts"]

log = logging.getLogger("tenure.guardian")

DEFAULT_ACTIVATIONS = 1_000
MINIMUM = 10


def activations_to_keep(backend_db: str) -> int:
    """Never raises: a missing or unreadable config keeps the default."""
    import tomllib  # here: the guardian parses no other TOML, and not at its start
    try:
        rows = read_rows(backend_db, "SELECT text FROM config WHERE id = 1")
        value = tomllib.loads(rows[0][0]).get("retention", {}).get("activations") \
            if rows else None
    except (sqlite3.Error, UnsafePath, tomllib.TOMLDecodeError, AttributeError,
            TypeError):   # TypeError: a damaged row whose text is a blob or a number
        return DEFAULT_ACTIVATIONS
    if isinstance(value, bool) or not isinstance(value, int) or value < MINIMUM:
        return DEFAULT_ACTIVATIONS
    return value


def prune_artifacts(paths: GuardianPaths, state: StateStore, running: str | None,
                    keep: int) -> int:
    """Remove all but the newest ``keep`` handoff records, checkpoints and backend logs
    (never those of activation ``running``). Returns how many were removed."""
    removed = 0
    order = _newest_activations(state, keep)
    for directory, prefix in ((paths.handoffs, ""), (paths.logs, "backend-")):
        try:
            entries = [e for e in os.scandir(directory) if e.is_file(follow_symlinks=False)
                       and e.name.startswith(prefix)]
        except FileNotFoundError:
            continue
        # the newest activations as state.db recorded them (mtimes are wall times: a
        # clock set back made the files just written the oldest), then the others
        # (of an activation state.db no longer has) by mtime
        entries.sort(key=lambda e: (0, order[aid], 0.0) if (
            aid := e.name[len(prefix):].split(".")[0]) in order else
            (1, 0, -e.stat(follow_symlinks=False).st_mtime))
        for e in entries[keep:]:
            if running and running in e.name:
                continue
            os.unlink(e.path)
            removed += 1
    return removed


def _newest_activations(state: StateStore, n: int) -> dict[str, int]:
    """The ids of the newest ``n`` activations, in the order state.db recorded them
    (0: the newest); none when it cannot be read."""
    try:
        return {a.id: i for i, a in enumerate(state.activations(n))}
    except (TenureError, sqlite3.Error) as exc:
        log.warning("pruning files by their times alone: %s", exc)
        return {}
