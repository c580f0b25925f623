"""guardian.release.remove_tree: a read-only tree goes entirely, and a symlink in it is
removed, never followed (what it points at is left as it was)."""

from __future__ import annotations

import os
from pathlib import Path

from guardian.treefiles import remove_tree


def test_a_read_only_tree_is_removed_and_its_symlinks_are_not_followed(tmp_path: Path):
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "f").write_text("kept")
    root = tmp_path / "tree"
    deep = root.joinpath(*"abcdefghij")
    deep.mkdir(parents=True)
    (deep / "m.py").write_text("")
    (root / "a" / "to-dir").symlink_to(outside / "keep")
    (root / "a" / "to-file").symlink_to(outside / "keep" / "f")
    for here, _dirs, filenames in os.walk(root, topdown=False):
        for name in filenames:
            if not os.path.islink(os.path.join(here, name)):
                os.chmod(os.path.join(here, name), 0o444)
        os.chmod(here, 0o555)   # read-only, as an installed release is
    remove_tree(root)
    assert not root.exists()
    assert (outside / "keep" / "f").read_text() == "kept"


def test_a_symlink_given_as_the_root_is_unlinked_only(tmp_path: Path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("kept")
    (tmp_path / "link").symlink_to(tmp_path / "d")
    remove_tree(tmp_path / "link")
    assert not os.path.lexists(tmp_path / "link")
    assert (tmp_path / "d" / "f").read_text() == "kept"
