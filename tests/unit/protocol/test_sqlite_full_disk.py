"""A database that cannot be written at its creation (a full disk) is STORAGE_FAILED,
not STATE_CORRUPT, and leaves nothing behind: the empty file it left before was refused
as truncated at every later open ("put the real file back"), even once space was freed,
so the home could not start again. The write fails for real: the file size limit
(RLIMIT_FSIZE 0) of a child process, with SIGXFSZ ignored, as ENOSPC would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from protocol.durable import open_sqlite

CHILD = """
import json, resource, signal, sys
from protocol.durable import open_sqlite
from protocol.errors import TenureError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
try:
    open_sqlite(sys.argv[1], "tenure-test", 1, "CREATE TABLE t (x INTEGER)").close()
    print(json.dumps({"opened": True}))
except TenureError as exc:
    print(json.dumps(exc.to_wire()))
"""


def _open_on_a_full_disk(db: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(db)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return json.loads(out)


def test_a_database_the_disk_cannot_take_is_storage_failed_and_not_left(tmp_path: Path):
    db = tmp_path / "state.db"
    err = _open_on_a_full_disk(db)
    assert err["code"] == "STORAGE_FAILED", err
    assert err["msg"].startswith(f"opening {db} failed: the storage failed ("), err
    assert err["data"]["path"] == str(db)
    assert sorted(p.name for p in tmp_path.iterdir()) == []   # nothing half-made
    conn = open_sqlite(db, "tenure-test", 1, "CREATE TABLE t (x INTEGER)")  # space again
    conn.close()


def test_an_existing_database_the_disk_fails_under_is_kept(tmp_path: Path):
    """Only a file this open created is removed: one that existed stays as it was."""
    db = tmp_path / "state.db"
    open_sqlite(db, "tenure-test", 1, "CREATE TABLE t (x INTEGER)").close()
    before = db.read_bytes()
    _open_on_a_full_disk(db)
    assert db.read_bytes() == before


def test_a_transaction_the_disk_fills_under_raises_the_full_disk(tmp_path: Path):
    """SQLite ends a transaction itself on SQLITE_FULL; the ROLLBACK after it then
    failed ('cannot rollback - no transaction is active') and that error replaced the
    real one: an RPC answered INTERNAL instead of STORAGE_FAILED. max_page_count makes
    the database full as a full disk would."""
    import os
    import sqlite3

    import pytest

    from protocol.durable import transaction
    from protocol.storage import storage_failure
    tmp_path.chmod(0o700)
    db = open_sqlite(str(tmp_path / "x.db"), "tenure-test", 1, "CREATE TABLE t (x BLOB)")
    try:
        db.execute("PRAGMA max_page_count = 30")
        def fill() -> None:
            for _ in range(200):
                db.execute("INSERT INTO t VALUES (?)", (os.urandom(3000),))
        for nested in (False, True):
            with pytest.raises(sqlite3.OperationalError) as e, transaction(db):
                if nested:   # a savepoint inside
                    with transaction(db):
                        fill()
                else:
                    fill()
            assert "full" in str(e.value)
            failed = storage_failure(e.value, "x")
            assert failed is not None and failed.code == "STORAGE_FAILED"
            assert not db.in_transaction
    finally:
        db.close()
