"""A private database (protocol.durable.open_sqlite) is created 0600 and refused, with
UNSAFE_PATH and nothing changed, when it was made readable or writable by others, or is
owned by another user: its daemon would act on state anyone could have written, or
has exposed app environments. Real files, real SQLite."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from protocol.durable import open_sqlite
from protocol.errors import UnsafePath

SCHEMA = "CREATE TABLE t (x INTEGER)"


def _open(path: Path) -> None:
    open_sqlite(path, "tenure-test", 1, SCHEMA).close()


def test_created_private(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    _open(db)
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    _open(db)   # and opened again


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o604, 0o640])
def test_open_to_others_is_refused_and_left_alone(tmp_path: Path, mode: int) -> None:
    db = tmp_path / "state.db"
    _open(db)
    os.chmod(db, mode)
    before = db.read_bytes()
    with pytest.raises(UnsafePath) as err:
        _open(db)
    assert f"mode {mode:04o}" in err.value.msg and "chmod 600" in err.value.msg
    assert db.read_bytes() == before and stat.S_IMODE(db.stat().st_mode) == mode


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    _open(db)
    os.chown(db, 65534, 65534)
    with pytest.raises(UnsafePath, match="owned by uid 65534"):
        _open(db)


@pytest.mark.parametrize("target", ["real.db", "nowhere.db"])
def test_a_symlink_is_refused_and_its_target_left_alone(tmp_path: Path, target: str) -> None:
    real = tmp_path / "real.db"
    _open(real)
    before = real.read_bytes()
    link = tmp_path / "state.db"
    link.symlink_to(tmp_path / target)
    with pytest.raises(UnsafePath, match="symlink"):
        _open(link)
    assert real.read_bytes() == before and not (tmp_path / "nowhere.db").exists()
