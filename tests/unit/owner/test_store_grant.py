"""OwnerStore.grant reads the grant an earlier owner stored (fence.grant_wire, a BLOB
column SQLite lets hold any type): whatever the column holds, the answer names an
activation or None, and never raises."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgpack
import pytest

from owner.store import OwnerStore


@pytest.mark.parametrize("stored, activation", [
    (msgpack.packb({"grant": {"activation": "act-1"}, "sig": b"s"}), "act-1"),
    (b"\xc1", None),                                 # not msgpack
    (msgpack.packb([1, 2]), None),                   # not a map
    (msgpack.packb({"grant": {"activation": 7}}), None),
    ("abc", None), (5, None), (2.5, None),           # TEXT, INTEGER, REAL: TypeError before
])
def test_whatever_the_column_holds_the_grant_reads(tmp_path: Path, stored: Any,
                                                   activation: str | None) -> None:
    os.chmod(tmp_path, 0o700)
    store = OwnerStore(str(tmp_path / "owner.db"))
    try:
        store.db.execute("UPDATE fence SET epoch = 3, grant_wire = ? WHERE id = 1",
                         (stored,))
        assert store.grant() == {"epoch": 3, "activation": activation}
    finally:
        store.close()
