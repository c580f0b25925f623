"""protocol.storage.storage_failure: the storage's own failures are told apart from
defects, with SQLite's and the kernel's real errors."""

from __future__ import annotations

import errno
import sqlite3

from protocol.storage import storage_failure


def _sqlite_error(sql: str) -> sqlite3.Error:
    db = sqlite3.connect(":memory:")
    try:
        db.execute("PRAGMA max_page_count = 2")
        db.execute("CREATE TABLE t (x BLOB)")
        db.execute(sql)
    except sqlite3.Error as exc:
        return exc
    finally:
        db.close()
    raise AssertionError(f"{sql} did not fail")


def test_sqlite_full_and_full_disks_are_storage_failures() -> None:
    full = storage_failure(_sqlite_error("INSERT INTO t VALUES (zeroblob(100000))"), "apply")
    assert full is not None and full.code_str == "STORAGE_FAILED"
    assert "database or disk is full" in full.msg and full.msg.startswith("apply failed")
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS):
        assert storage_failure(OSError(code, "x"), "m") is not None


def test_defects_are_not_storage_failures() -> None:
    assert storage_failure(_sqlite_error("SELECT * FROM nosuch"), "m") is None  # a bug
    assert storage_failure(sqlite3.ProgrammingError("closed"), "m") is None
    assert storage_failure(OSError(errno.ENOENT, "gone"), "m") is None
    assert storage_failure(ValueError("x"), "m") is None


def test_a_failed_copy_names_both_paths() -> None:
    exc = OSError(errno.ENOSPC, "No space left on device", "/src/a.py", None, "/home/x/a.py")
    failed = storage_failure(exc, "tenure up")
    assert failed is not None
    assert "(OSError: No space left on device: /src/a.py -> /home/x/a.py)" in failed.msg
