"""A journal.db this owner cannot read is refused, not written, whatever is wrong with
it, and the refusal names the file and the way out (docs/state.md)."""

from __future__ import annotations

import os

import pytest

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
