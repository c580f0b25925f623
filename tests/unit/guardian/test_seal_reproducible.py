"""The same tree seals to the same release, whatever the sealing process had imported
before: `tenure up` and `tenure release seal` gave two ids for one tree (10 pycs differed
by a byte: marshal flags a string interned in the compiling process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from guardian.seal import seal
from protocol.errors import NotFound

SEAL = ("import sys\n{imports}\nfrom pathlib import Path\n"
        "from guardian.seal import seal\nprint(seal(Path(sys.argv[1])).id)\n")


# what a command that has imported all of tenure has interned
EVERY_MODULE = """
import importlib, pkgutil
for pkg in ("protocol", "owner", "guardian", "backend", "backend.cli", "backend.jobs"):
    for info in pkgutil.iter_modules(importlib.import_module(pkg).__path__, pkg + "."):
        try:
            importlib.import_module(info.name)
        except Exception:
            pass
"""


def _sealed_id(out: Path, imports: str) -> str:
    done = subprocess.run([sys.executable, "-c", SEAL.format(imports=imports), str(out)],
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip().splitlines()[-1]


def test_one_tree_seals_to_one_release_whatever_was_imported_first(tmp_path: Path) -> None:
    bare = _sealed_id(tmp_path / "a", "")
    busy = _sealed_id(tmp_path / "b", EVERY_MODULE)
    assert bare == busy


def test_sealing_into_a_directory_that_does_not_exist_is_not_found(tmp_path: Path) -> None:
    """Was INTERNAL, naming a temporary path the command made up
    (`No such file or directory: /nonexist/dir/.x.tmp-5a7c29f37a8f`)."""
    with pytest.raises(NotFound) as e:
        seal(tmp_path / "missing" / "x")
    assert e.value.msg == (f"{tmp_path / 'missing'} is not a directory: the sealed release "
                           "is made in a directory that exists")
