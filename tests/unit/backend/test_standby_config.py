"""A backend keeps its newest config parses (backend.config.parse_recent): a plan, its
apply and the apply's operation parse one text once, and a standby parses the applied
config while it waits for its activation, which its generation then finds, but only
when the config at start is the very same text from the same source. Reading
backend.db for it changes nothing."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

import backend.config
from backend.__main__ import prepare
from backend.config import RECENT, parse_config, parse_recent, parsed_before
from backend.store import BackendStore, saved_config
from protocol.errors import ConfigInvalid, UnsafePath
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


@pytest.fixture(autouse=True)
def _no_recent_parses():
    backend.config._recent.clear()
    yield
    backend.config._recent.clear()


def test_a_recent_parse_is_used_only_for_the_same_text_and_source() -> None:
    first = parse_recent(A, "/etc/tenure.toml")
    assert parsed_before(A, "/etc/tenure.toml")
    assert parse_recent(A, "/etc/tenure.toml") is first
    assert first == parse_config(A, "/etc/tenure.toml")
    changed = parse_recent(B, "/etc/tenure.toml")
    assert changed.revision == parse_config(B, "/etc/tenure.toml").revision
    moved = parse_recent(A, "/srv/tenure.toml")
    assert moved is not first and moved.source == "/srv/tenure.toml"


def test_only_the_newest_parses_are_kept_and_a_bad_config_is_not() -> None:
    texts = [A.replace('"1"', f'"{n + 10}"') for n in range(RECENT + 1)]
    for t in texts:
        parse_recent(t, "t.toml")
    assert not parsed_before(texts[0], "t.toml")
    assert all(parsed_before(t, "t.toml") for t in texts[1:])
    parse_recent(texts[1], "t.toml")            # used again: now the newest
    parse_recent(A, "t.toml")
    assert parsed_before(texts[1], "t.toml") and not parsed_before(texts[2], "t.toml")
    with pytest.raises(ConfigInvalid):
        parse_recent("[stacks", "t.toml")
    assert not parsed_before("[stacks", "t.toml")


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
    assert prepare(tmp_path / "fresh") is False         # no backend.db: nothing to parse
    home = tmp_path / "home"
    _applied(home, A)
    assert prepare(home) is True
    assert parsed_before(A, "/etc/tenure.toml")
    bad = tmp_path / "bad"
    Path(Layout(bad).backend_db).parent.mkdir(parents=True)
    Path(Layout(bad).backend_db).write_bytes(b"not a database" * 100)
    assert prepare(bad) is False
    assert "not parsed ahead (DatabaseError)" in caplog.text
    secret = tmp_path / "secret"
    _applied(secret, A.replace('"1"]', '"1"]\nenv = { TOKEN = "s3cr3t" }\nbogus = 1'),
             revision="r")
    assert prepare(secret) is False                      # an invalid config: CONFIG_INVALID
    assert "CONFIG_INVALID" in caplog.text and "s3cr3t" not in caplog.text
