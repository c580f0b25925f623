"""Sealing compiles the release: a file of tenure's own packages that does not compile
refuses the seal (it would fail where it is imported, at the latest in a handoff); a
dependency's is left without a pyc, as pip does."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from guardian import seal
from guardian.seal import _compile
from protocol.errors import BadRequest, Internal, StorageFailed

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


def _writes_fail(monkeypatch: pytest.MonkeyPatch, number: int) -> None:
    """Make every pyc write of the compiling interpreter fail with ``number``, as a full
    disk makes it fail: its script is run with py_compile's writer replaced."""
    fail = (f"import importlib._bootstrap_external as _b\n"
            f"def _write(path, data, mode=0o666):\n"
            f"    raise OSError({number}, 'injected')\n"
            f"_b._write_atomic = _write\n")
    monkeypatch.setattr(seal, "_COMPILE", fail + seal._COMPILE)


@pytest.mark.parametrize("number", [errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS])
def test_a_full_disk_while_compiling_is_storage_failed_naming_the_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: int) -> None:
    """Regression: any failure of the compiling interpreter was INTERNAL with its
    traceback, so a full disk during the first `tenure up` looked like a bug."""
    lib = _lib(tmp_path, {"backend/fine.py": "x = 1\n"})
    _writes_fail(monkeypatch, number)
    with pytest.raises(StorageFailed) as e:
        _compile(lib, own=frozenset({"backend"}))
    path = f"{lib}/backend/fine.py"
    assert e.value.data["path"] == path
    assert os.strerror(number) in e.value.msg and path in e.value.msg


def test_another_error_of_the_compiling_interpreter_is_internal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = _lib(tmp_path, {"backend/fine.py": "x = 1\n"})
    _writes_fail(monkeypatch, errno.EACCES)
    with pytest.raises(Internal, match="compiling the release failed"):
        _compile(lib, own=frozenset({"backend"}))
    monkeypatch.setattr(seal, "_COMPILE", "raise SystemExit('ERRNO 28 not json')")
    with pytest.raises(Internal, match="ERRNO 28 not json"):
        _compile(lib, own=frozenset({"backend"}))
