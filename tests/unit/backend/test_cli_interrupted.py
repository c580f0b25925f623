"""Ctrl-C of a command that asked tenure to do something: exit 130, and a word that only
the waiting ended (with --json, an object too). It printed nothing, and a script reading
--json got no JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backend.cli import commands, main


def _interrupt(*_: Any) -> int:
    raise KeyboardInterrupt


@pytest.mark.parametrize("as_json", [False, True])
def test_a_restart_cut_short_says_the_roll_goes_on(monkeypatch: Any, capsys: Any,
                                                   tmp_path: Path, as_json: bool) -> None:
    monkeypatch.setattr(commands, "cmd_restart", _interrupt)
    argv = ["--home", str(tmp_path), *(["--json"] if as_json else []), "restart", "s/a"]
    assert main.main(argv) == 130
    out, err = capsys.readouterr()
    assert "tenure: interrupted: `tenure restart` stopped waiting; the backend carries " \
        "the roll on" in err
    if as_json:
        said = json.loads(out)
        assert said["ok"] is False and said["interrupted"] is True
    else:
        assert out == ""


def test_a_follow_cut_short_ends_silently(monkeypatch: Any, capsys: Any,
                                         tmp_path: Path) -> None:
    monkeypatch.setattr(commands, "cmd_logs", _interrupt)
    assert main.main(["--home", str(tmp_path), "logs", "-f"]) == 130
    assert capsys.readouterr() == ("", "")


def test_a_command_with_an_action_is_named_whole(monkeypatch: Any, capsys: Any,
                                                tmp_path: Path) -> None:
    """It said "`tenure backend` stopped waiting" for `tenure backend upgrade`."""
    monkeypatch.setattr(commands, "cmd_backend", _interrupt)
    assert main.main(["--home", str(tmp_path), "backend", "upgrade", "ab" * 32]) == 130
    assert "`tenure backend upgrade` stopped waiting; the guardian carries it on" in \
        capsys.readouterr().err
