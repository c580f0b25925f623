"""Sealing compiles the release: a file of tenure's own packages that does not compile
refuses the seal (it would fail where it is imported, at the latest in a handoff); a
dependency's is left without a pyc, as pip does."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.seal import _compile
from protocol.errors import BadRequest

BROKEN = "def broken(:\n    pass\n"


def _lib(tmp_path: Path, files: dict[str, str]) -> Path:
    lib = tmp_path / "lib"
    for rel, text in files.items():
        (lib / rel).parent.mkdir(parents=True, exist_ok=True)
        (lib / rel).write_text(text)
    return lib


def test_an_own_file_that_does_not_compile_refuses_the_seal(tmp_path: Path) -> None:
    lib = _lib(tmp_path, {"backend/fine.py": "x = 1\n", "backend/api2.py": BROKEN})
    with pytest.raises(BadRequest, match=r"backend/api2.py:1 does not compile "
                                         r"\(SyntaxError: invalid syntax\); nothing was "
                                         "sealed") as e:   # was: a warning only
        _compile(lib, own=frozenset({"backend", "owner"}))
    assert e.value.data == {"file": "backend/api2.py"}


def test_a_dependencys_file_that_does_not_compile_is_left_without_a_pyc(tmp_path: Path
                                                                       ) -> None:
    lib = _lib(tmp_path, {"backend/fine.py": "x = 1\n", "vendored/py2only.py": BROKEN})
    _compile(lib, own=frozenset({"backend"}))
    assert list((lib / "backend" / "__pycache__").glob("fine.*.pyc"))
    assert not (lib / "vendored" / "__pycache__").exists()
