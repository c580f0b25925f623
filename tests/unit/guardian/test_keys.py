"""The guardian's signing key file: created private, read back strictly, never replaced."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from guardian.keys import load_or_create_key
from protocol.errors import StateCorrupt, UnsafePath


def test_created_private_and_read_back(tmp_path: Path) -> None:
    path = str(tmp_path / "guardian.key")
    key = load_or_create_key(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_or_create_key(path).public_key() == key.public_key()
    assert os.listdir(tmp_path) == ["guardian.key"]  # no temp file left


def test_a_key_written_by_earlier_releases_still_signs(tmp_path: Path) -> None:
    """Earlier tenure wrote guardian.key with the cryptography package: same PKCS#8 PEM."""
    path = tmp_path / "guardian.key"
    old = Ed25519PrivateKey.generate()
    path.write_bytes(old.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    path.chmod(0o600)
    assert load_or_create_key(str(path)).sign(b"grant") == old.sign(b"grant")


@pytest.mark.parametrize("content", [
    b"garbage\n",
    generate_private_key(SECP256R1()).private_bytes(Encoding.PEM, PrivateFormat.PKCS8,
                                                    NoEncryption()),
])
def test_a_file_that_is_no_ed25519_key_is_refused_and_kept(tmp_path: Path,
                                                          content: bytes) -> None:
    path = tmp_path / "guardian.key"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(StateCorrupt) as e:
        load_or_create_key(str(path))
    assert e.value.data == {"path": str(path)}
    assert path.read_bytes() == content


def test_a_key_others_can_read_or_a_symlink_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "guardian.key"
    load_or_create_key(str(path))
    path.chmod(0o640)
    with pytest.raises(StateCorrupt, match="readable by others"):
        load_or_create_key(str(path))
    path.chmod(0o600)
    link = tmp_path / "link.key"
    link.symlink_to(path)
    with pytest.raises(UnsafePath):
        load_or_create_key(str(link))
