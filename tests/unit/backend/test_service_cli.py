"""`tenure service status` says plainly who shares a uid with whom: the helper, and the
command itself (with a stand-in `systemctl` on PATH that answers `show`)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

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
