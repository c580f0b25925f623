"""A home under a directory someone else can change is refused: whoever can write there
can move the home away and put another in its place, and an owner that sees its home
replaced stops every application (a user did so through a 0777 parent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.errors import UnsafePath
from protocol.sockets import check_ancestors, ensure_private_dir


def _refused(path: Path) -> str:
    with pytest.raises(UnsafePath) as err:
        ensure_private_dir(path / "home" / "execution", root=path / "home")
    assert not (path / "home").exists()   # nothing created
    return str(err.value.data["path"])


def test_a_parent_writable_by_others_is_refused_unless_sticky(tmp_path: Path) -> None:
    parent = tmp_path / "p"
    parent.mkdir(mode=0o700)
    os.chmod(parent, 0o777)
    assert _refused(parent) == str(parent)
    os.chmod(parent, 0o775)                 # the group too
    assert _refused(parent) == str(parent)
    os.chmod(parent, 0o1777)                # sticky, as /tmp: nobody moves what is ours
    ensure_private_dir(parent / "home" / "execution", root=parent / "home")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory away")
def test_a_parent_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "p"
    parent.mkdir(mode=0o755)
    os.chown(parent, 65534, 65534)
    assert _refused(parent) == str(parent)


def test_a_symlink_above_the_home_is_judged_by_where_it_leads(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    (open_dir / "deep").mkdir(mode=0o755)
    link = tmp_path / "link"
    link.symlink_to(open_dir / "deep")
    assert _refused(link) == str(open_dir)  # reached through the link, still open
    safe = tmp_path / "safe"
    safe.mkdir(mode=0o755)
    (tmp_path / "ok").symlink_to(safe)
    check_ancestors(tmp_path / "ok" / "home")
