"""A backend generation refuses a recovery.db that is not a database and says the way
out: move it aside (it holds only a certificate, written again), then review a forced
recovery. Was: the refusal named no way out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backend.store import RecoveryStore
from protocol.errors import StateCorrupt


@pytest.mark.parametrize("content", [b"not a database" * 100, b""])
def test_a_recovery_db_that_is_no_database_is_refused_with_the_way_out(tmp_path: Path,
                                                                       content: bytes):
    path = tmp_path / "recovery.db"
    path.write_bytes(content)
    os.chmod(path, 0o600)
    with pytest.raises(StateCorrupt) as refused:
        RecoveryStore(str(path))
    assert "move recovery.db aside" in refused.value.msg
    assert "`tenure backend recover --dry-run` then reviews a forced recovery" \
        in refused.value.msg
    assert path.read_bytes() == content           # never modified
