"""Procfiles → drafts: one app per line, run in the Procfile's directory, through sh -c
only when the command uses shell syntax."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.importers.model import Context, FindingKind, SourceResult
from backend.importers.pm2 import read_pm2
from backend.importers.procfile import read_procfile
from backend.model import RestartMode
from protocol.errors import ConfigInvalid


def _read(tmp_path: Path, text: str) -> SourceResult:
    path = tmp_path / "Procfile"
    path.write_text(text)
    return read_procfile(str(path), Context(environ={}, hostname="h"))


def test_each_line_is_an_app_restarted_always_in_the_procfile_directory(
        tmp_path: Path) -> None:
    result = _read(tmp_path, "# comment\n\nweb: bundle exec puma -C config/puma.rb\n"
                             "worker:python -m worker 'a b'\n")
    assert [(d.app.name, d.app.command, d.origin.line) for d in result.drafts] == [
        ("web", ("bundle", "exec", "puma", "-C", "config/puma.rb"), 3),
        ("worker", ("python", "-m", "worker", "a b"), 4)]
    assert all(d.app.cwd == str(tmp_path) and d.app.restart is RestartMode.ALWAYS
               for d in result.drafts)
    assert result.findings == []


def test_shell_syntax_runs_through_sh_and_port_is_noted(tmp_path: Path) -> None:
    result = _read(tmp_path, "web: puma -p ${PORT:-5000} 2>&1 | tee log\n")
    assert result.drafts[0].app.command == ("sh", "-c", "puma -p ${PORT:-5000} 2>&1 | tee log")
    [note] = result.findings
    assert note.kind is FindingKind.NOTE and "PORT" in note.problem


@pytest.mark.parametrize(("text", "problem"), [
    ("release: rails db:migrate\n", "once per deploy"),
    ("web: a\nweb: b\n", "already defined on line 1"),
    ("  web: indented\n", "not a 'name: command' line"),
    ("web.1: x\n", "not a 'name: command' line"),
    ("web:\n", "not a 'name: command' line"),
    ("web: run 'unbalanced\n", "cannot split the command"),
])
def test_lines_that_are_not_imported_are_reported(tmp_path: Path, text: str,
                                                  problem: str) -> None:
    result = _read(tmp_path, text)
    reported = [f for f in result.findings if f.kind is FindingKind.NOT_MAPPED]
    assert len(reported) == 1 and problem in reported[0].problem
    assert len(result.drafts) == text.count("\n") - 1


def test_a_leading_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "Procfile"
    path.write_bytes(b"\xef\xbb\xbfweb: sleep 1\nworker: sleep 10\n")
    result = read_procfile(str(path), Context(environ={}, hostname="h"))
    assert [(d.app.name, d.app.command) for d in result.drafts] == [
        ("web", ("sleep", "1")), ("worker", ("sleep", "10"))]
    assert result.findings == []


def test_an_unreadable_procfile_is_config_invalid(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalid, match="cannot read the file"):
        read_procfile(str(tmp_path / "Procfile"), Context())


def test_a_procfile_or_pm2_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    """Regression: the error said "cannot read the file: 'utf-8' codec can't decode
    byte 0xff in position 26" with no line, where a supervisord file named it."""
    (tmp_path / "Procfile").write_bytes(b"web: echo ok\nworker: echo \xff\n")
    with pytest.raises(ConfigInvalid) as e:
        read_procfile(str(tmp_path / "Procfile"), Context())
    assert (e.value.msg, e.value.data["line"]) == (
        f"{tmp_path}/Procfile:2: the file is not valid UTF-8", 2)
    (tmp_path / "eco.json").write_bytes(b'{"apps": [\n{"name": "\xff"}]}')
    with pytest.raises(ConfigInvalid) as e:
        read_pm2(str(tmp_path / "eco.json"), Context())
    assert e.value.data["line"] == 2


def test_a_dot_env_beside_the_procfile_is_reported_and_not_read(tmp_path: Path) -> None:
    """foreman, honcho and `heroku local` load .env into every process: its variables
    would be lost without a word. It is named, and its content is not read."""
    (tmp_path / "Procfile").write_text("web: puma\n")
    (tmp_path / ".env").write_text("DATABASE_URL=postgres://u:secret@h/app\n")
    result = read_procfile(str(tmp_path / "Procfile"), Context())
    assert [(f.kind, f.origin.file, f.origin.key) for f in result.findings] == [
        (FindingKind.NOT_MAPPED, f"{tmp_path}/.env", ".env")]
    assert "secret" not in result.findings[0].problem
    assert result.drafts[0].app.env == {}
