"""protocol.durable.read_rows: the read-only way into another component's SQLite file
(the guardian reads backend.db; a standby reads the applied config). It never creates or
changes a file, refuses symlinks, and takes any path (a URI is built from it)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from protocol.durable import read_rows
from protocol.errors import UnsafePath


def _db(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (v TEXT)")
    conn.execute("INSERT INTO t VALUES ('a')")
    conn.commit()
    conn.close()


def test_rows_of_a_database_and_none_for_a_missing_file(tmp_path: Path) -> None:
    _db(tmp_path / "x.db")
    assert read_rows(str(tmp_path / "x.db"), "SELECT v FROM t") == [("a",)]
    assert read_rows(str(tmp_path / "none.db"), "SELECT 1") is None
    assert not (tmp_path / "none.db").exists()


def test_it_reads_only(tmp_path: Path) -> None:
    _db(tmp_path / "x.db")
    before = (tmp_path / "x.db").read_bytes()
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        read_rows(str(tmp_path / "x.db"), "INSERT INTO t VALUES ('b')")
    assert (tmp_path / "x.db").read_bytes() == before


def test_a_symlink_or_a_directory_is_refused(tmp_path: Path) -> None:
    _db(tmp_path / "x.db")
    os.symlink(tmp_path / "x.db", tmp_path / "link.db")
    with pytest.raises(UnsafePath):
        read_rows(str(tmp_path / "link.db"), "SELECT v FROM t")
    with pytest.raises(UnsafePath):
        read_rows(str(tmp_path), "SELECT 1")


def test_a_path_with_uri_characters_is_the_file_it_names(tmp_path: Path) -> None:
    odd = tmp_path / "a?mode=rw#b%20c"
    odd.mkdir()
    _db(odd / "x.db")
    assert read_rows(str(odd / "x.db"), "SELECT v FROM t") == [("a",)]
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        read_rows(str(odd / "x.db"), "INSERT INTO t VALUES ('b')")
    assert read_rows(str(tmp_path / "a"), "SELECT 1") is None   # not a prefix of it


def test_the_guardians_read_only_opens_take_any_path_too(tmp_path: Path) -> None:
    """state.db's preflight check and the certificate reader open through
    protocol.durable.connect_read_only as well."""
    from backend.store import RecoveryStore
    from guardian.recovery import read_certificate
    from guardian.state import StateStore, check_readable
    odd = tmp_path / "h?mode=rw#x"
    odd.mkdir()
    StateStore(str(odd / "state.db")).close()
    assert check_readable(str(odd / "state.db"))["format"] >= 1
    RecoveryStore(str(odd / "recovery.db")).close()
    assert read_certificate(str(odd / "recovery.db"))["valid"] is False
