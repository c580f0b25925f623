"""A journal.db this owner cannot read is refused, not written, whatever is wrong with
it, and the refusal names the file and the way out (docs/state.md)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from owner.journal import Journal, LogSource
from owner.journaldb import DAMAGED, open_writer
from protocol.errors import StateCorrupt

SHAPES = {
    "garbage": None,
    "no meta table": ("CREATE TABLE other (x)",),
    "tables are missing": (
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value)",
        "INSERT INTO meta VALUES ('format_version', 1)"),
}


@pytest.mark.parametrize("what", list(SHAPES))
def test_a_journal_this_owner_cannot_read_is_refused_with_the_way_out(tmp_path, what, sqlite_file):
    path = tmp_path / "journal.db"
    statements = SHAPES[what]
    if statements is None:
        path.write_bytes(b"\x5a" * 8192)
        os.chmod(path, 0o600)
    else:
        sqlite_file(path, *statements)
    before = path.read_bytes()
    with pytest.raises(StateCorrupt) as err:
        open_writer(str(path))
    assert err.value.msg.startswith(f"{path} is not a journal this owner can read (")
    assert err.value.msg.endswith(DAMAGED) and err.value.data["path"] == str(path)
    if statements is not None:
        assert f"({what})" in err.value.msg
    assert path.read_bytes() == before


def test_a_journal_of_another_format_is_refused_as_not_damaged(tmp_path, sqlite_file):
    """A newer tenure's journal is kept: no advice to set it aside."""
    path = tmp_path / "journal.db"
    sqlite_file(path, "CREATE TABLE meta (key TEXT PRIMARY KEY, value)",
        "INSERT INTO meta VALUES ('format_version', 2)")
    before = path.read_bytes()
    with pytest.raises(StateCorrupt) as err:
        open_writer(str(path))
    assert "format 2; this owner reads 1: run the tenure that wrote it" in err.value.msg
    assert DAMAGED not in err.value.msg and err.value.data["format_version"] == 2
    assert path.read_bytes() == before


def test_a_journal_whose_format_is_no_number_is_damaged(tmp_path, sqlite_file):
    path = tmp_path / "journal.db"
    sqlite_file(path, "CREATE TABLE meta (key TEXT PRIMARY KEY, value)",
        "INSERT INTO meta VALUES ('format_version', 'x')")
    with pytest.raises(StateCorrupt) as err:
        open_writer(str(path))
    assert err.value.msg.endswith(DAMAGED)


WEB = LogSource("shop", "web", 0, 1)

ROWS = {   # a row changed under the owner, as a hand edit or a bad disk would
    "a timestamp that is text": "UPDATE records SET ts='noon' WHERE id=2",
    "data that is text": "UPDATE records SET data='text' WHERE id=2",
    "an unknown stream": "UPDATE records SET stream='stdin' WHERE id=2",
    "an instance that is text": "UPDATE records SET instance='one' WHERE id=2",
    # Python's sqlite3 fails the row (OperationalError "Could not decode to UTF-8"):
    # was INTERNAL
    "a stack that is not UTF-8": "UPDATE records SET stack=CAST(x'ff' AS TEXT) WHERE id=2",
    "a stream that is not UTF-8": "UPDATE records SET stream=CAST(x'ff' AS TEXT) WHERE id=2",
}


def _journal_of(path: Path, n: int) -> None:
    with Journal(path) as j:
        j.append(WEB, "stdout", [(b"line %d" % i, 0) for i in range(n)])
        assert j.flush(timeout=30)


def _edit(path: Path, statement: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(statement)
    finally:
        conn.close()


@pytest.mark.parametrize("what", list(ROWS))
def test_a_damaged_row_fails_the_read_with_the_way_out(tmp_path, what):
    """Before, the row went out as it was, and the reader failed on it (INTERNAL)."""
    path = tmp_path / "journal.db"
    _journal_of(path, 3)
    _edit(path, ROWS[what])
    with Journal(path) as j:
        assert [r.data for r in j.read(0, 1)] == [b"line 0"]   # the rows before it read
        for read in (lambda: j.read(0, 10), lambda: j.read_page(0, 10, tail=2),
                     lambda: j.read(0, 10, app="web")):
            with pytest.raises(StateCorrupt) as err:
                read()
            assert err.value.msg == (f"{path} is not a journal this owner can read "
                                     f"(record 2 is malformed); {DAMAGED}")
        assert [r.data for r in j.read(2, 10)] == [b"line 2"]


def test_a_damaged_extent_fails_a_read_by_app_with_the_way_out(tmp_path):
    path = tmp_path / "journal.db"
    _journal_of(path, 3)
    _edit(path, "UPDATE extents SET last_id='x'")
    with Journal(path) as j:
        assert len(j.read(0, 10)) == 3   # read by id, the extents are not needed
        with pytest.raises(StateCorrupt) as err:
            j.read(0, 10, app="web")
        assert "(an extent is malformed)" in err.value.msg and DAMAGED in err.value.msg


def test_a_next_id_that_is_no_number_is_read_from_the_records(tmp_path):
    path = tmp_path / "journal.db"
    _journal_of(path, 3)
    _edit(path, "UPDATE meta SET value='x' WHERE key='next_id'")
    with Journal(path) as j:
        assert j.last_id() == 3
        assert j.read_page(0, 10).last_id == 3 and j.read_page(0, 10, tail=1).next == 3
        j.append(WEB, "stdout", [(b"more", 0)])   # the writer goes on from the records
        assert j.flush(timeout=30) and j.last_id() == 4


def test_a_page_sqlite_finds_corrupt_fails_the_read_with_the_way_out(tmp_path):
    path = tmp_path / "journal.db"
    _journal_of(path, 5000)   # many pages: the records' leaves lie well past the schema
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2 // 4096 * 4096)
        f.write(b"\xa5" * 4096)
    with Journal(path) as j, pytest.raises(StateCorrupt) as err:
        j.read(0, 10_000)
    assert err.value.msg.startswith(f"{path} is not a journal this owner can read (")
    assert err.value.msg.endswith(DAMAGED) and err.value.data == {"path": str(path)}


NOT_UTF8 = {   # read at open: the owner refused to start with INTERNAL (exit 7)
    "an extent's app": "UPDATE extents SET app=CAST(x'ff' AS TEXT)",
    "a budget's key": "INSERT INTO meta VALUES (CAST(x'726574656e74696f6e2f732fff' AS TEXT),"
                      " 1048576)",   # retention/s/\xff
    "a pruned mark's key": "INSERT INTO meta VALUES (CAST(x'7072756e65642f732fff' AS TEXT),"
                           " 5)",    # pruned/s/\xff
}


@pytest.mark.parametrize("what", list(NOT_UTF8))
def test_text_that_is_not_utf8_read_at_open_is_damage(tmp_path, what):
    path = tmp_path / "journal.db"
    _journal_of(path, 3)
    _edit(path, NOT_UTF8[what])
    with pytest.raises(StateCorrupt) as err:
        Journal(path)
    assert err.value.msg.startswith(f"{path} is not a journal this owner can read (Could "
                                    "not decode to UTF-8 column ")
    assert err.value.msg.endswith(DAMAGED) and err.value.data == {"path": str(path)}


def test_text_that_is_not_utf8_fails_the_list_of_apps_and_a_forget_as_damage(tmp_path):
    path = tmp_path / "journal.db"
    _journal_of(path, 3)
    with Journal(path) as j:
        _edit(path, "UPDATE extents SET stack=CAST(x'ff' AS TEXT)")
        _edit(path, "INSERT INTO meta VALUES (CAST(x'7072756e65642f73686f702f7765622fff'"
                    " AS TEXT), 5)")   # pruned/shop/web/\xff: a forget reads the marks
        for call in (j.apps, lambda: j.forget_apps([("shop", "web")])):
            with pytest.raises(StateCorrupt) as err:
                call()
            assert "(Could not decode to UTF-8 column " in err.value.msg
            assert err.value.msg.endswith(DAMAGED)
