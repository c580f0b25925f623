"""open_sqlite's way out ends the refusal of a damaged database only: a file of another
kind or a newer format is not damaged, and is not to be set aside."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.durable import open_sqlite
from protocol.errors import StateCorrupt

WAY_OUT = "set it aside (runbook)"



def _refusal(path: Path) -> str:
    with pytest.raises(StateCorrupt) as err:
        open_sqlite(path, "tenure-test", 1, "CREATE TABLE t (x)", way_out=WAY_OUT)
    return err.value.msg


@pytest.mark.parametrize("statements", [
    None,                                                       # garbage
    (),                                                         # empty file
    ("CREATE TABLE t (x)",),                                    # no meta table
    ("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)",),  # no kind, no format
    ("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)",
     "INSERT INTO meta VALUES ('kind', 'tenure-test'), ('format_version', 'x')"),
])
def test_a_damaged_database_is_refused_with_the_way_out(tmp_path, statements, sqlite_file):
    path = tmp_path / "x.db"
    if statements is None:
        path.write_bytes(b"\x5a" * 8192)
        path.chmod(0o600)
    elif not statements:
        path.write_bytes(b"")
        path.chmod(0o600)
    else:
        sqlite_file(path, *statements)
    assert _refusal(path).endswith(f"; {WAY_OUT}")


@pytest.mark.parametrize("kind, version", [("tenure-test", "2"), ("another-kind", "1")])
def test_another_kind_or_format_is_refused_without_it(tmp_path, kind, version, sqlite_file):
    path = tmp_path / "x.db"
    sqlite_file(path, "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)",
        f"INSERT INTO meta VALUES ('kind', '{kind}'), ('format_version', '{version}')")
    assert WAY_OUT not in _refusal(path)
