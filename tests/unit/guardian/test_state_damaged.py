"""state.db as the guardian reads it, damaged (SQLite lets a column hold any type): a
receipt's detail, a recorded grant and the release selector read whole or raise
STATE_CORRUPT, never a JSON, attribute or type error, and a damaged selector is never
compared as if it were sound."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from guardian.phases import Kind
from guardian.state import StateStore
from protocol.errors import StateCorrupt
from protocol.grant import Grant


def _store(tmp_path: Path) -> tuple[StateStore, str]:
    os.chmod(tmp_path, 0o700)
    store = StateStore(str(tmp_path / "state.db"))
    act = store.create_activation(Kind.START, "r" * 64, None, None)
    store.record_grant(Grant(1, act.id, "r" * 64, "o-1", 1.5), b"\x01" * 64)
    return store, act.id


@pytest.mark.parametrize("detail", ["x", b"\xff", "[]", "1", "null"])
def test_a_damaged_receipt_detail_is_state_corrupt(tmp_path: Path, detail: Any) -> None:
    store, aid = _store(tmp_path)
    try:
        assert store.receipts(aid)[0]["detail"]["kind"] == "start"
        store.db.execute("UPDATE receipts SET detail = ?", (detail,))
        for read in (lambda: store.receipts(aid), lambda: store.restored_by(aid)):
            with pytest.raises(StateCorrupt, match="detail is not a JSON map"):
                read()
    finally:
        store.close()


@pytest.mark.parametrize("column, value", [("sig", "x"), ("sig", 3), ("sig", 2.5),
                                           ("issued_at", "x")])
def test_a_damaged_grant_is_state_corrupt(tmp_path: Path, column: str, value: Any) -> None:
    """bytes(3) of a sig read as three zero bytes (a huge integer, as many), text
    raised TypeError."""
    store, _ = _store(tmp_path)
    try:
        assert store.signed_grant(1) is not None
        store.db.execute(f"UPDATE grants SET {column} = ?", (value,))
        with pytest.raises(StateCorrupt, match="grant of epoch 1 is damaged"):
            store.signed_grant(1)
    finally:
        store.close()


@pytest.mark.parametrize("column, value", [("revision", "x"), ("revision", -1),
                                           ("current", b"r"), ("previous", b"p")])
def test_a_damaged_selector_is_state_corrupt(tmp_path: Path, column: str,
                                             value: Any) -> None:
    """A revision of text matched the compare-and-set of a select given that text and
    reset the revision to 1."""
    store, _ = _store(tmp_path)
    try:
        store.db.execute(f"UPDATE selector SET {column} = ?", (value,))
        with pytest.raises(StateCorrupt, match="selector is damaged"):
            store.selector()
    finally:
        store.close()
