"""`tenure service status` says plainly who shares a uid with whom."""

from __future__ import annotations

from pathlib import Path

from backend.cli.service import separation
from units import Installation


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
