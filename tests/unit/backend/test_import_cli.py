"""`tenure import` on the command line: output, report, --json, -o, exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.cli.main import main
from backend.config import load_config
from backend.importers import SourceFormat, detect_format, import_files

PROCFILE = "web: gunicorn app:wsgi\nrelease: ./migrate\nworker: celery -A app worker\n"


@pytest.fixture
def procfile(tmp_path: Path) -> Path:
    project = tmp_path / "shop"
    project.mkdir()
    (project / "Procfile").write_text(PROCFILE)
    return project / "Procfile"


def test_prints_the_config_and_reports_on_stderr(procfile: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(procfile)]) == 0
    out, err = capsys.readouterr()
    expected = import_files([str(procfile)])
    assert out == expected.text
    assert err.splitlines() == expected.report_lines()
    assert err.startswith(f"not mapped: {procfile}:2: release: ")
    assert "[stacks.shop.apps.web]" in out  # default stack: the Procfile's directory


def test_json_has_the_config_and_the_findings(procfile: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json", "import", str(procfile), "--stack", "demo"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert err == ""
    assert doc["ok"] is True and doc["output"] is None
    assert doc["stacks"] == {"demo": ["web", "worker"]}
    assert doc["not_mapped"] == [{"file": str(procfile), "line": 2, "key": "release",
                                  "problem": doc["not_mapped"][0]["problem"]}]
    assert doc["notes"] == []
    assert doc["toml"] == import_files([str(procfile)], "demo").text


def test_output_file_is_written_once_and_loads(procfile: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "tenure.toml"
    assert main(["import", str(procfile), "-o", str(target)]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith(f"wrote {target} (2 apps, 1 stack, 1 setting not mapped); check")
    assert sorted(load_config(target).stacks["shop"].apps) == ["web", "worker"]
    before = target.read_bytes()
    assert main(["import", str(procfile), "-o", str(target)]) == 2
    assert "BAD_REQUEST" in capsys.readouterr().err
    assert target.read_bytes() == before


@pytest.mark.parametrize(("args", "status", "code"), [
    (["missing/Procfile"], 1, "CONFIG_INVALID"),
    (["notes.txt"], 2, "BAD_REQUEST"),
    (["Procfile", "-o", "no/such/dir/tenure.toml"], 2, "BAD_REQUEST"),
    (["Procfile", "--stack=.bad"], 2, "BAD_REQUEST"),
])
def test_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                capsys: pytest.CaptureFixture[str], args: list[str], status: int,
                code: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Procfile").write_text(PROCFILE)
    (tmp_path / "notes.txt").write_text("web: x\n")
    assert main(["import", *args]) == status
    assert f"tenure: {code}: " in capsys.readouterr().err


def test_from_names_the_format_when_the_file_name_does_not(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "processes.txt"
    path.write_text("web: ./serve\n")
    assert main(["import", str(path), "--from", "procfile", "--stack", "s"]) == 0
    assert "[stacks.s.apps.web]" in capsys.readouterr().out


def test_nothing_importable_is_an_error_after_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "Procfile"
    path.write_text("release: ./migrate\n")
    assert main(["import", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[0].startswith("not mapped: ")
    assert "tenure: CONFIG_INVALID: nothing to import" in err


@pytest.mark.parametrize(("directory", "stack"), [
    ("My Project", "My-Project"), (".hidden", "hidden"),
    ("ünï", "imported"),      # too little of it is left to name the stack: the default
])
def test_a_default_stack_name_changed_from_the_directory_name_has_a_note(
        tmp_path: Path, directory: str, stack: str) -> None:
    path = tmp_path / directory / "Procfile"
    path.parent.mkdir()
    path.write_text("web: ./serve\n")
    result = import_files([str(path)])
    assert list(result.config.stacks) == [stack]
    assert result.report_lines() == [
        f"note: {path}: stack {directory!r} (the name of the file's directory) is named "
        f"{stack!r} in tenure.toml; --stack NAME chooses another"]


def test_no_note_for_a_directory_name_no_app_uses(tmp_path: Path) -> None:
    path = tmp_path / "My Project" / "s.conf"
    path.parent.mkdir()
    path.write_text("[group:g]\nprograms=web\n[program:web]\ncommand=/bin/web\n"
                    "stopasgroup=true\n")
    result = import_files([str(path)])
    assert list(result.config.stacks) == ["g"] and result.report_lines() == []
    assert import_files([str(path)], "s").report_lines() == []


@pytest.mark.parametrize(("name", "fmt"), [
    ("Procfile", SourceFormat.PROCFILE), ("Procfile.dev", SourceFormat.PROCFILE),
    ("ecosystem.config.js", SourceFormat.PM2), ("pm2.config.cjs", SourceFormat.PM2),
    ("ecosystem.js", SourceFormat.PM2), ("process.json", SourceFormat.PM2),
    ("supervisord.conf", SourceFormat.SUPERVISORD), ("app.ini", SourceFormat.SUPERVISORD),
    ("server.js", None), ("README", None),
])
def test_format_is_told_by_the_file_name(name: str, fmt: SourceFormat | None) -> None:
    assert detect_format(f"/some/dir/{name}") is fmt


def test_an_output_file_that_appears_during_the_import_is_not_overwritten(
        procfile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: -o was checked before the import (a PM2 .js file runs node for up to
    10 s) and then written with a rename, which replaces whatever is there by then."""
    import backend.importers

    target = tmp_path / "tenure.toml"
    real = backend.importers.import_files

    def import_then_someone_writes(*args: object, **kwargs: object) -> object:
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        target.write_text("# theirs\n")
        return result

    monkeypatch.setattr(backend.importers, "import_files", import_then_someone_writes)
    assert main(["import", str(procfile), "-o", str(target)]) == 2
    assert f"tenure: BAD_REQUEST: {target} exists; remove it" in capsys.readouterr().err
    assert target.read_text() == "# theirs\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("tenure.toml")] == \
        ["tenure.toml"]  # no temporary file left behind


def test_an_output_symlink_that_appears_during_the_import_is_not_followed(
        procfile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import backend.importers

    target, victim = tmp_path / "tenure.toml", tmp_path / "victim"
    real = backend.importers.import_files

    def import_then_link(*args: object, **kwargs: object) -> object:
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        target.symlink_to(victim)   # dangling
        return result

    monkeypatch.setattr(backend.importers, "import_files", import_then_link)
    assert main(["import", str(procfile), "-o", str(target)]) == 2
    assert "BAD_REQUEST" in capsys.readouterr().err
    assert not victim.exists() and target.is_symlink()


def test_output_on_a_file_system_without_hard_links_is_still_written(
        procfile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    def no_links(*_: object, **__: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    target = tmp_path / "tenure.toml"
    assert main(["import", str(procfile), "-o", str(target)]) == 0
    assert sorted(load_config(target).stacks["shop"].apps) == ["web", "worker"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("tenure.toml")] == \
        ["tenure.toml"]
