"""owner.db as an owner reads it, written by an earlier owner or damaged (SQLite lets a
column hold any type): the grant names an activation or None and never raises; a launch
row reads whole or raises STATE_CORRUPT naming the launch, never a JSON, type or value
error."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from owner.store import LaunchState, OwnerStore
from protocol.errors import StateCorrupt


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


def _launch(store: OwnerStore) -> None:
    store.insert_launch("k1", {"stack": "s", "app": "a", "instance": 0, "generation": 1},
                        {"argv": ["sleep", "1"]}, 1, "boot")
    store.mark_running("k1", 4242, 77, 4242, 1.5)


@pytest.mark.parametrize("column, value", [
    ("spec", "x"), ("spec", b"\xff"), ("spec", "[1]"), ("spec", "null"),
    ("spec", "[" * 100_000), ("state", "bogus"), ("exit", "5"), ("error", "{"),
    ("pid", "x"), ("pid", 2.5), ("start_ticks", b"t"), ("instance", "zero"),
    ("stack", b"s"), ("started_at", "x"),
    # in range and of their type, but not what an owner writes: a reconcile signals
    # the launch's process group, so a pgid of another program's group would be killed
    ("pgid", 4243), ("pgid", 1), ("pgid", 0), ("pid", 0), ("pid", -4242),
    ("start_ticks", -1)])
def test_a_damaged_launch_row_is_state_corrupt_naming_the_launch(
        tmp_path: Path, column: str, value: Any) -> None:
    os.chmod(tmp_path, 0o700)
    store = OwnerStore(str(tmp_path / "owner.db"))
    try:
        _launch(store)
        assert store.get_launch("k1").state is LaunchState.RUNNING   # type: ignore[union-attr]
        store.db.execute(f"UPDATE launches SET {column} = ?", (value,))
        with pytest.raises(StateCorrupt, match="the row of launch 'k1' cannot be read"):
            store.get_launch("k1")
    finally:
        store.close()


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=st.sampled_from(["stack", "app", "instance", "generation", "spec", "state",
                               "pid", "start_ticks", "pgid", "started_at", "ended_at",
                               "exit", "error"]),
       value=st.none() | st.integers(-2**63, 2**63 - 1) | st.floats() | st.text(max_size=8)
       | st.binary(max_size=8) | st.sampled_from(["{}", "[]", '{"a": 1}', "running"]))
def test_whatever_a_launch_column_holds_the_row_reads_or_is_state_corrupt(
        tmp_path: Path, column: str, value: Any) -> None:
    os.chmod(tmp_path, 0o700)
    path = tmp_path / "owner.db"
    for leftover in tmp_path.glob("owner.db*"):
        leftover.unlink()
    store = OwnerStore(str(path))
    try:
        _launch(store)
        try:
            store.db.execute(f"UPDATE launches SET {column} = ?", (value,))
        except Exception:   # a NOT NULL or CHECK constraint: SQLite refused the damage
            return
        try:
            row = store.get_launch("k1")
        except StateCorrupt:
            return
        assert row is not None and isinstance(row.spec, dict)
        assert row.pid is None or type(row.pid) is int
    finally:
        store.close()


@pytest.mark.parametrize("table, column, value, read", [
    ("fence", "epoch", "x", lambda s: s.epoch()),
    ("fence", "epoch", -1, lambda s: s.grant()),
    ("fence", None, None, lambda s: s.epoch()),
    ("fence", None, None, lambda s: s.grant()),
    ("intents", "intent", "bogus", lambda s: s.intent("s")),
    ("intents", "revision", "x", lambda s: s.intents()),
    ("intents", "intent", 5, lambda s: s.set_intent("s", "stopped", 1)),
    ("descendants", "pid", "x", lambda s: s.descendants("boot")),
    ("descendants", "start_ticks", 2.7, lambda s: s.descendants("boot")),
])
def test_a_damaged_fence_intent_or_descendant_is_state_corrupt(
        tmp_path: Path, table: str, column: str, value: Any, read: Any) -> None:
    """The epoch fences every mutation, an intent decides whether a stack may start,
    and a descendant is a process to prove gone: a damaged value is refused, never
    read as another (int() of text raised ValueError, of 2.7 gave 2)."""
    os.chmod(tmp_path, 0o700)
    store = OwnerStore(str(tmp_path / "owner.db"))
    try:
        _launch(store)
        store.db.execute("UPDATE fence SET epoch = 3 WHERE id = 1")
        store.set_intent("s", "stopped", 0)   # type: ignore[arg-type]
        store.db.execute("INSERT INTO descendants VALUES (4243, 78, 'k1', 'boot', 0)")
        if column is None:
            store.db.execute(f"DELETE FROM {table}")
        else:
            store.db.execute(f"UPDATE {table} SET {column} = ?", (value,))
        with pytest.raises(StateCorrupt, match=r"owner\.db: "):
            read(store)
    finally:
        store.close()
