"""Trusted directories and the installation record (units.trust)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.errors import UnsafePath
from units.trust import (
    check_trusted_chain,
    ensure_trusted_dir,
    read_record,
    service_account_uid,
    write_record,
)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    os.chmod(tmp_path, 0o755)
    return tmp_path


def test_a_directory_others_can_write_is_not_trusted(base: Path) -> None:
    ensure_trusted_dir(base / "a" / "b")
    os.chmod(base / "a", 0o775)
    with pytest.raises(UnsafePath, match="can be changed by another user"):
        check_trusted_chain(base / "a" / "b")
    os.chmod(base / "a", 0o1777)  # sticky: others cannot rename what is not theirs
    if os.geteuid() == 0:
        check_trusted_chain(base / "a" / "b")
    os.chmod(base / "a", 0o755)
    os.symlink(base / "a", base / "link")
    with pytest.raises(UnsafePath, match="symlink"):
        check_trusted_chain(base / "link" / "b")


@pytest.mark.root  # the record must be root's
def test_the_record_names_the_account_for_its_home_only(base: Path) -> None:
    path = base / "installation.json"
    assert read_record(path) is None and service_account_uid(path, Path("/h")) is None
    write_record(path, scope="system", home=Path("/h"), user="nobody", group="nogroup")
    assert service_account_uid(path, Path("/h")) == 65534
    assert service_account_uid(path, Path("/other")) is None
    os.chmod(path, 0o666)  # anyone could have written it: worthless
    with pytest.raises(UnsafePath):
        read_record(path)
    assert service_account_uid(path, Path("/h")) is None
