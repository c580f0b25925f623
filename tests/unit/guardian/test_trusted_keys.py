"""The guardian's trusted release keys file as it reads it: absent means signing is not
required; anything it cannot read is STATE_CORRUPT naming the file, never ignored."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guardian.trust import trusted_release_keys
from protocol.errors import StateCorrupt


def _file(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "trusted-release-keys"
    path.write_bytes(data)
    os.chmod(path, 0o600)
    return str(path)


def test_absent_means_signing_is_not_required(tmp_path: Path) -> None:
    assert trusted_release_keys(str(tmp_path / "trusted-release-keys")) is None


@pytest.mark.parametrize("data, said", [
    (b"\xff\xfe not text\n", "not text (one ed25519:<base64> key per line)"),  # was
    (b"ed25519:not-base64!\n", ""),                                   # UnicodeDecodeError
])
def test_a_file_it_cannot_read_is_state_corrupt_naming_it(tmp_path: Path, data: bytes,
                                                          said: str) -> None:
    path = _file(tmp_path, data)
    with pytest.raises(StateCorrupt) as err:
        trusted_release_keys(path)
    assert err.value.msg.startswith(f"{path}: ") and said in err.value.msg
