"""How many finished activations the guardian keeps: ``[retention] activations`` of the
applied tenure.toml (read from backend.db, read only), 1,000 when unset or unreadable.

The guardian is mechanism only and does not parse configs beyond this one number: the
backend validated the config before applying it (backend/config_retention.py).
"""

from __future__ import annotations

import sqlite3

from protocol.durable import read_rows
from protocol.errors import UnsafePath

__all__ = ["DEFAULT_ACTIVATIONS", "activations_to_keep"]

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
