"""Every private SQLite database tenure opens has a bounded page cache."""

from __future__ import annotations

from pathlib import Path

from protocol.durable import CACHE_KIB, open_sqlite


def test_open_sqlite_bounds_the_page_cache(tmp_path: Path) -> None:
    conn = open_sqlite(tmp_path / "x.db", "tenure-test", 1, "CREATE TABLE t (a)")
    try:
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -CACHE_KIB
    finally:
        conn.close()
