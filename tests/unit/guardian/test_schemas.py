"""The schema gate's rules, and the formats read from a real backend.db."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.events import EventLog
from backend.schemas import SCHEMAS
from backend.store import BackendStore
from guardian import schemas as gate
from protocol.errors import SchemaIncompatible, StateCorrupt, UnsafePath

OURS = SCHEMAS  # what this release declares


def _with(reads: dict | None = None, writes: dict | None = None) -> dict:
    return {"reads": {**OURS["reads"], **(reads or {})},
            "writes": {**OURS["writes"], **(writes or {})}}


def test_this_release_takes_over_from_itself_and_from_before_declarations(tmp_path: Path):
    store = BackendStore(str(tmp_path / "backend.db"))
    try:
        EventLog(store, "a1")
        disk = gate.on_disk(str(tmp_path / "backend.db"))
    finally:
        store.close()
    assert disk == {"backend.db": 1, "backend.db:events": 1, "backend.db:retired": 1,
                    "backend.db:starts": 1, "backend.db:start_waits": 1,
                    "backend.db:holder": 1, "backend.db:stops_to_ask": 1}
    gate.check(OURS, disk, OURS)
    gate.check(OURS, disk, gate.declared({"report": {"ok": True}}))   # LEGACY incumbent
    assert gate.on_disk(str(tmp_path / "none.db")) == {}


def test_a_part_it_does_not_know_is_no_obstacle_but_one_at_another_version_is():
    disk = {"backend.db": 1, "backend.db:jobs": 1, "backend.db:new": 3}
    gate.check(OURS, disk, OURS)
    with pytest.raises(SchemaIncompatible) as e:
        gate.check(_with(reads={"backend.db:jobs": [2]}), disk, OURS)
    assert e.value.data["problems"] == [
        {"format": "backend.db:jobs", "on_disk": 1, "reads": [2]}]


def test_a_format_changed_in_place_and_an_unreadable_checkpoint_are_refused():
    disk = {"backend.db": 1}
    with pytest.raises(SchemaIncompatible) as e:
        gate.check(_with(reads={"backend.db": [1, 2]}, writes={"backend.db": 2}), disk, OURS)
    assert "formats change only by adding parts" in e.value.msg
    with pytest.raises(SchemaIncompatible) as e2:
        gate.check(_with(reads={"checkpoint": [2]}), disk, OURS)
    assert "writes checkpoint format 1" in e2.value.msg
    gate.check(_with(reads={"checkpoint": [2]}), disk, None)   # no incumbent: no checkpoint


def test_a_database_format_it_does_not_read_is_refused_even_undeclared():
    with pytest.raises(SchemaIncompatible):
        gate.check(gate.LEGACY, {"backend.db": 2}, None)


def test_malformed_declarations_and_meta_are_state_corrupt(tmp_path: Path):
    with pytest.raises(StateCorrupt):
        gate.declared({"report": {"schemas": {"reads": []}}})
    bad = tmp_path / "backend.db"
    bad.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(StateCorrupt):
        gate.on_disk(str(bad))


def test_a_symlinked_backend_db_is_refused_not_followed(tmp_path: Path):
    store = BackendStore(str(tmp_path / "real.db"))
    store.close()
    (tmp_path / "backend.db").symlink_to(tmp_path / "real.db")
    with pytest.raises(UnsafePath):
        gate.on_disk(str(tmp_path / "backend.db"))
