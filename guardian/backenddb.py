"""Reading backend.db from the guardian: read only, never creating or changing it (the
schema gate reads its formats, retention its applied config)."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

__all__ = ["query"]


def query(backend_db: str, sql: str) -> list[tuple[Any, ...]] | None:
    """The rows of ``sql`` on backend.db, or None when there is no backend.db yet.
    Raises sqlite3.Error."""
    if not os.path.exists(backend_db):
        return None
    conn = sqlite3.connect(f"file:{backend_db}?mode=ro", uri=True, timeout=5.0)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()
