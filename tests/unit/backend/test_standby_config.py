"""A standby parses the applied config while it waits for its activation, and its
generation uses that parse only when the config it finds at start is the very same
text from the same source (backend.config.parse_saved). Reading it changes nothing."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from backend.__main__ import prepare
from backend.config import Parsed, parse_config, parse_saved
from backend.store import BackendStore, saved_config
from protocol.errors import UnsafePath
from protocol.layout import Layout

A = '[stacks.s.apps.a]\ncommand = ["sleep", "1"]\n'
B = '[stacks.s.apps.b]\ncommand = ["sleep", "2"]\n'


def _applied(home: Path, text: str, source: str = "/etc/tenure.toml",
             revision: str | None = None) -> str:
    path = Layout(home).backend_db
    os.makedirs(os.path.dirname(path), exist_ok=True)
    store = BackendStore(path)
    try:
        with store.tx() as db:
            store.set_config(db, text, source,
                             revision or parse_config(text, source).revision)
    finally:
        store.close()
    return path


def test_the_prepared_config_is_used_only_for_the_same_text_and_source() -> None:
    prepared = Parsed(A, "/etc/tenure.toml", parse_config(A, "/etc/tenure.toml"))
    assert parse_saved(A, "/etc/tenure.toml", prepared) is prepared.config
    changed = parse_saved(B, "/etc/tenure.toml", prepared)
    assert changed.revision == parse_config(B, "/etc/tenure.toml").revision
    moved = parse_saved(A, "/srv/tenure.toml", prepared)
    assert moved is not prepared.config and moved.source == "/srv/tenure.toml"
    assert parse_saved(A, "/etc/tenure.toml", None) == prepared.config


def test_saved_config_reads_backend_db_without_changing_it(tmp_path: Path) -> None:
    assert saved_config(str(tmp_path / "backend.db")) is None
    assert not (tmp_path / "backend.db").exists()
    path = _applied(tmp_path, A)
    before = Path(path).read_bytes()
    assert saved_config(path) == (A, "/etc/tenure.toml")
    assert Path(path).read_bytes() == before
    # a reader of a WAL database may add SQLite's index files, nothing else
    assert set(os.listdir(os.path.dirname(path))) <= \
        {"backend.db", "backend.db-wal", "backend.db-shm"}


def test_a_symlinked_backend_db_is_refused(tmp_path: Path) -> None:
    path = _applied(tmp_path / "real", A)
    os.symlink(path, tmp_path / "link.db")
    with pytest.raises(UnsafePath):
        saved_config(str(tmp_path / "link.db"))


def test_prepare_parses_what_is_applied_and_never_raises(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    caplog.set_level(logging.INFO, "tenure.backend")
    assert prepare(tmp_path / "fresh") is None          # no backend.db: nothing to parse
    home = tmp_path / "home"
    _applied(home, A)
    got = prepare(home)
    assert got is not None and got.text == A
    assert got.config.revision == parse_config(A, "/etc/tenure.toml").revision
    bad = tmp_path / "bad"
    Path(Layout(bad).backend_db).parent.mkdir(parents=True)
    Path(Layout(bad).backend_db).write_bytes(b"not a database" * 100)
    assert prepare(bad) is None
    assert "not parsed ahead (DatabaseError)" in caplog.text
    secret = tmp_path / "secret"
    _applied(secret, A.replace('"1"]', '"1"]\nenv = { TOKEN = "s3cr3t" }\nbogus = 1'),
             revision="r")
    assert prepare(secret) is None                       # an invalid config: CONFIG_INVALID
    assert "CONFIG_INVALID" in caplog.text and "s3cr3t" not in caplog.text
