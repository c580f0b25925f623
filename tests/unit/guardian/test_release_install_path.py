"""`tenure release install PATH` with a path no release can be at: a name longer than
the kernel allows, a path longer than PATH_MAX, a NUL. Each was INTERNAL (an OSError or
a ValueError out of lstat); each is NOT_FOUND naming why, and nothing is installed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guardian.release import install
from protocol.errors import NotFound


@pytest.mark.parametrize("path, why", [
    ("/" + "a" * 256, "File name too long"),
    ("/tmp/" + "b" * 256 + "/c", "File name too long"),
    ("/a" * 2100, "File name too long"),
    ("/a\x00b", "embedded null byte"),
])
def test_a_path_no_release_can_be_at_is_not_found(tmp_path: Path, path: str,
                                                  why: str) -> None:
    os.chmod(tmp_path, 0o700)
    with pytest.raises(NotFound, match=f"no release can be there \\({why}\\)"):
        install(Path(path), tmp_path / "releases")
    assert not (tmp_path / "releases").exists()
