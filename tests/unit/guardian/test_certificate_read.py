"""The recovery certificate as the guardian reads it (guardian.recovery.read_certificate):
the backend writes it, so its body is checked before recovery trusts it. Whatever the
row holds, the reader returns a JSON object whose cursor is a count, or no certificate
marked damaged (never JSONDecodeError, UnicodeDecodeError, or a list that breaks the
check after it): recovery then blocks, and a forced recovery can still be reviewed."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.store import RecoveryStore
from guardian.recovery import read_certificate


def _db(tmp_path: Path, body: Any) -> str:
    os.chmod(tmp_path, 0o700)
    path = str(tmp_path / "recovery.db")
    if not os.path.exists(path):
        RecoveryStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE certificate SET valid = 1, body = ?, updated_at = 1", (body,))
    db.close()
    return path


def test_a_certificate_the_backend_wrote_reads(tmp_path: Path) -> None:
    path = str(tmp_path / "recovery.db")
    os.chmod(tmp_path, 0o700)
    store = RecoveryStore(path)
    store.publish({"cursor": 7, "epoch": 3})
    store.close()
    assert read_certificate(path)["body"] == {"cursor": 7, "epoch": 3}


@pytest.mark.parametrize("body", ["{", b"\xf2", "[1]", '"x"', "7", '{"cursor": "x"}',
                                  '{"cursor": 1e400}', '{"cursor": -1}',
                                  '{"cursor": true}', "[" * 100_000,
                                  # the guardian's status file froze on these: its
                                  # snapshot raised every second
                                  '{"at": "noon"}', '{"at": 1e400}', '{"launches": "2"}'])
def test_a_body_recovery_cannot_use_is_no_certificate_marked_damaged(tmp_path: Path,
                                                                    body: Any) -> None:
    assert read_certificate(_db(tmp_path, body)) == {
        "valid": False, "body": None, "updated_at": 1,
        "damaged": ("its body is not a JSON object with counts for its cursor and launches "
                    "and a time for its at")}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(min_size=1, max_size=40) | st.text(min_size=1, max_size=40)
       | st.dictionaries(st.sampled_from(["cursor", "epoch", "owner"]),
                         st.none() | st.booleans() | st.integers(-2**70, 2**70)
                         | st.floats() | st.text(max_size=4)).map(json.dumps))
def test_whatever_the_row_holds_it_reads_sound_or_damaged(tmp_path: Path,
                                                          body: Any) -> None:
    cert = read_certificate(_db(tmp_path, body))
    got = cert["body"]
    if got is None:
        assert cert["valid"] is False and cert["damaged"]
        return
    assert isinstance(got, dict) and "damaged" not in cert
    assert type(got.get("cursor", 0)) is int and got.get("cursor", 0) >= 0


@pytest.mark.parametrize("body", ["{", b"\xf2", "[1]", "7", "[" * 100_000])
def test_the_backend_reads_a_damaged_body_as_none_and_invalidates_it_with_the_reason(
        tmp_path: Path, body: Any) -> None:
    """The backend, which writes the certificate, compares its next one with the stored
    body and invalidates it on any change: a damaged body raised JSONDecodeError there,
    and the invalidation's json_set failed with 'malformed JSON'."""
    path = _db(tmp_path, body)
    store = RecoveryStore(path)
    try:
        assert store.read()["body"] is None
        store.invalidate("a launch")
        assert store.read() == {"valid": False, "body": {"invalidated": "a launch"},
                                "updated_at": store.read()["updated_at"]}
        store.publish({"cursor": 1})
        store.invalidate("a stop")
        assert store.read()["body"] == {"cursor": 1, "invalidated": "a stop"}
    finally:
        store.close()
    assert read_certificate(path)["body"] == {"cursor": 1, "invalidated": "a stop"}


@pytest.mark.parametrize("flag", ["no", "yes", b"\x01", 2, -1, 1.5])
def test_a_valid_flag_other_than_0_or_1_is_no_valid_certificate(tmp_path: Path,
                                                                 flag: Any) -> None:
    """bool('no') is True: a damaged flag read as valid, and the backend's invalidation
    (WHERE valid = 1) never matched it, so it stayed 'valid' after every launch."""
    path = _db(tmp_path, '{"cursor": 7}')
    with sqlite3.connect(path) as db:
        db.execute("UPDATE certificate SET valid = ?", (flag,))
    db.close()
    assert read_certificate(path) == {"valid": False, "body": None, "updated_at": 1,
                                      "damaged": "its valid flag is neither 0 nor 1"}
    store = RecoveryStore(path)
    try:
        assert store.read()["valid"] is False
        store.invalidate("a launch")
        assert store.db.execute("SELECT valid FROM certificate").fetchone() == (0,)
    finally:
        store.close()
    assert read_certificate(path)["valid"] is False and "damaged" not in read_certificate(path)


def test_status_calls_a_damaged_certificate_unusable_not_none_yet(tmp_path: Path) -> None:
    """Was: `certificate: none yet` and recovery `pending` while recovery blocked on it."""
    from backend.cli.render import recovery_state
    from backend.cli.render_backend import backend
    from guardian.testing import FakeCoordinator, run_on

    async def go(co: FakeCoordinator) -> dict[str, Any]:
        co.world.certificate = {"valid": False, "body": None, "updated_at": 1.0,
                                "damaged": "its valid flag is neither 0 nor 1"}
        return co.status()
    st = run_on(tmp_path, go)
    assert st["certificate"]["error"] == "damaged: its valid flag is neither 0 nor 1"
    text = backend("status", {**st, "recovery": recovery_state(st)})
    assert "unusable (damaged: its valid flag is neither 0 nor 1)" in text, text
