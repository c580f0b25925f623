"""`tenure service status` says plainly who shares a uid with whom: the helper, and the
command itself (with a stand-in `systemctl` on PATH that answers `show`)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from backend.cli.main import main
from backend.cli.service import separation
from units import Installation

SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls"
printf 'ActiveState=active\\nSubState=running\\n'
"""


@pytest.fixture
def systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `systemctl` first on PATH; returns the file its calls are appended to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(SYSTEMCTL)
    (bin_dir / "systemctl").chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir / "calls"


def test_user_scope_says_apps_share_the_users_uid() -> None:
    inst = Installation.for_scope("user", home=Path("/h/t"), python=Path("/py"))
    got = separation(inst)
    assert got["apps_share_uid"] is True
    assert "cannot separate processes of one uid" in got["note"]


def test_system_scope_names_who_runs_as_whom() -> None:
    inst = Installation.for_scope("system", home=Path("/var/lib/tenure"), python=Path("/py"),
                                  user="svc")
    got = separation(inst)
    assert got == {"apps_share_uid": False, "owner": "root", "control_plane": "svc",
                   "note": got["note"]}
    assert "refused on every socket" in got["note"]


def test_service_status_in_user_scope_says_apps_share_the_uid(
        tmp_path: Path, systemctl: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    assert main(["--home", home, "service", "status", "--scope", "user"]) == 0
    text = capsys.readouterr().out
    assert "tenure.service: {'ActiveState': 'active'" in text
    assert text.splitlines()[-1].startswith("user scope: the owner, guardian, backends and "
                                            "every app run as you")
    assert "tenure cannot separate processes of one uid" in text
    assert main(["--json", "--home", home, "service", "status", "--scope", "user"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["privileges"]["apps_share_uid"] is True
    assert doc["tenure-owner.service"] == {"ActiveState": "active", "SubState": "running"}
    calls = systemctl.read_text().splitlines()
    assert len(calls) == 4 and all(c.startswith("--user show ") for c in calls), calls


def test_service_status_in_system_scope_names_the_service_account(
        tmp_path: Path, systemctl: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--json", "--home", str(tmp_path / "home"), "service", "status", "--scope",
            "system", "--user-account", "svc"]
    assert main(argv) == 0
    privileges = json.loads(capsys.readouterr().out)["privileges"]
    assert privileges["apps_share_uid"] is False and privileges["control_plane"] == "svc"
    assert not any(c.startswith("--user") for c in systemctl.read_text().splitlines())


@pytest.fixture
def prepared(monkeypatch: pytest.MonkeyPatch) -> list[Installation]:
    """`units.prepare` replaced by a recorder: the installations it was asked for (no
    plan is written, so system scope touches nothing of this machine)."""
    import units
    seen: list[Installation] = []

    def prepare(inst: Installation) -> Any:
        seen.append(inst)
        return SimpleNamespace(to_json=lambda: {"home": str(inst.home)}, digest="0" * 64)
    monkeypatch.setattr(units, "prepare", prepare)
    return seen


@pytest.mark.parametrize(("argv", "env", "home"), [
    ([], None, "/var/lib/tenure"),
    (["--home", "/srv/t"], None, "/srv/t"),
    ([], "/srv/env", "/srv/env"),
])
def test_system_scope_defaults_the_home_to_var_lib_tenure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prepared: list[Installation],
        capsys: pytest.CaptureFixture[str], argv: list[str], env: str | None,
        home: str) -> None:
    """Root's own ~/.local/state/tenure is no home for a system installation (was: the
    CLI's default home for every command was passed on, and /var/lib/tenure never
    applied); --home and TENURE_HOME still name one."""
    monkeypatch.setenv("HOME", str(tmp_path / "roothome"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    if env is None:
        monkeypatch.delenv("TENURE_HOME", raising=False)
    else:
        monkeypatch.setenv("TENURE_HOME", env)
    assert main(["--json", *argv, "service", "install", "--prepare", "--scope",
                 "system"]) == 0
    assert [str(i.home) for i in prepared] == [home]
    assert json.loads(capsys.readouterr().out)["home"] == home


def test_user_scope_still_defaults_to_the_users_state_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        prepared: list[Installation]) -> None:
    monkeypatch.delenv("TENURE_HOME", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert main(["--json", "service", "install", "--prepare", "--scope", "user"]) == 0
    assert [i.home for i in prepared] == [tmp_path / "state" / "tenure"]


def test_prepare_with_a_missing_parent_of_the_home_is_unsafe_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(was: INTERNAL, No such file or directory)"""
    home = tmp_path / "missing" / "home"
    argv = ["--json", "--home", str(home), "service", "install", "--prepare", "--scope",
            "user"]
    assert main(argv) == 1
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["code"] == "UNSAFE_PATH", err
    assert err["data"]["path"] == str(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()
