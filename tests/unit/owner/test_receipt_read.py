"""owner-receipt.json as a start reads it: whatever the file holds (an older owner's, a
hand edit, a torn disk), read_receipt returns a receipt whose state, boot id, instance
and pid are sound or raises STATE_CORRUPT, and admit_start ends in a coded error, never
TypeError or KeyError, and never files a receipt outside its archive."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from owner.receipt import RECEIPT_KIND, admit_start, read_receipt
from protocol.durable import atomic_write
from protocol.errors import ReconcileRequired, StateCorrupt, TenureError

BOOT = "b" * 32
GOOD = {"kind": RECEIPT_KIND, "format": 1, "state": "running", "instance": "ab12",
        "pid": 4242, "boot_id": BOOT}
VALUES = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | \
    st.text(max_size=12) | st.lists(st.integers(), max_size=2) | \
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)


def _write(home: Path, rec: dict[str, Any]) -> str:
    os.chmod(home, 0o700)
    path = home / "owner-receipt.json"
    atomic_write(path, json.dumps(rec).encode())
    return str(path)


def test_a_sound_receipt_reads(tmp_path: Path) -> None:
    assert read_receipt(_write(tmp_path, GOOD)) == GOOD


@pytest.mark.parametrize("field, value", [
    ("state", []), ("state", {}), ("state", "gone"), ("instance", "../../x"),
    ("instance", ""), ("instance", "a/b"), ("pid", None), ("pid", True), ("pid", 0),
    ("pid", "4242"), ("boot_id", 7)])
def test_a_malformed_field_is_state_corrupt(tmp_path: Path, field: str, value: Any) -> None:
    with pytest.raises(StateCorrupt, match="not a receipt this owner can read"):
        read_receipt(_write(tmp_path, {**GOOD, field: value}))


def test_a_running_receipt_without_a_pid_refuses_the_start_coded(tmp_path: Path) -> None:
    rec = dict(GOOD)
    del rec["pid"]
    with pytest.raises(StateCorrupt):
        admit_start(_write(tmp_path, rec), str(tmp_path / "ack.json"), BOOT)


def test_an_instance_that_climbs_out_is_never_archived(tmp_path: Path) -> None:
    path = _write(tmp_path, {**GOOD, "instance": "../../escaped"})
    with pytest.raises(StateCorrupt):
        admit_start(path, str(tmp_path / "ack.json"), BOOT,
                    archive=str(tmp_path / "archive"))
    assert not (tmp_path / "archive").exists()
    assert not list(tmp_path.parent.glob("escaped*"))   # archive/../../escaped.json


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(["state", "instance", "pid", "boot_id",
                                                "stages", "extra"]), VALUES, max_size=4),
       dropped=st.sets(st.sampled_from(["state", "instance", "pid", "boot_id"])))
def test_whatever_the_receipt_holds_the_start_ends_coded(
        tmp_path: Path, changes: dict[str, Any], dropped: set[str]) -> None:
    rec = {k: v for k, v in {**GOOD, **changes}.items() if k not in dropped}
    path = _write(tmp_path, rec)
    try:
        got = read_receipt(path)
    except StateCorrupt:
        got = None
    else:
        assert got is not None and isinstance(got["state"], str)
        assert type(got["pid"]) is int and "/" not in got["instance"]
    with pytest.raises(TenureError) as caught:
        admit_start(path, str(tmp_path / "ack.json"), BOOT, live_this_boot=1,
                    archive=str(tmp_path / "archive"))
    assert isinstance(caught.value, StateCorrupt if got is None else ReconcileRequired)
