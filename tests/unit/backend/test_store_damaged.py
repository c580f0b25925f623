"""backend.db's rows as a generation reads them, damaged (SQLite lets a column hold any
type, and a hand edit or a failing disk can leave text that is no JSON): every reader
answers STATE_CORRUPT naming the row and the way out, never a JSON or type error that
the API answered as INTERNAL and a starting generation died of (its recovery retried
seven times before it blocked)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.store import DAMAGED, BackendStore
from protocol.errors import StateCorrupt


@pytest.fixture
def store(tmp_path: Path) -> Iterator[BackendStore]:
    os.chmod(tmp_path, 0o700)
    s = BackendStore(str(tmp_path / "backend.db"))
    with s.tx() as db:
        s.set_config(db, "[stacks]", "t.toml", "rev-1")
    s.add_plan({"id": "p1", "config_text": "", "config_source": "t.toml",
                "config_revision": "rev-1", "live_revision": "rev-0", "fingerprint": "f",
                "changes": [{"app": "s/a", "change": "add"}], "kind": "apply"})
    s.create_operation({"id": "op1", "plan": "p1", "kind": "apply", "stacks": ["s"],
                        "stage": "planned", "generation": "act-1"})
    s.advance_operation("op1", "planned", "running", 1, progress={"done": 1})
    s.hold("owner-1", 3, "act-1")
    s.db.execute("INSERT INTO retired VALUES ('s/b/0', 4)")
    s.want_start("s/a/0", "act-1", ("order", 2e9))
    try:
        yield s
    finally:
        s.close()


READS: dict[str, Callable[[BackendStore], Any]] = {
    "operations": lambda s: s.operations(open_only=True),
    "plans": lambda s: s.plan("p1"),
    "config": lambda s: s.config(),
    "holder": lambda s: s.hold("owner-1", 3, "act-2"),
    "retired": lambda s: s.retired(),
    "starts_after_stop": lambda s: s.wanted_starts(),
    "start_waits": lambda s: s.start_waits(),
}


@pytest.mark.parametrize("table, column, value, named", [
    ("operations", "stacks", "{not json", "operation 'op1'"),
    ("operations", "stacks", '{"s": 1}', "operation 'op1'"),
    ("operations", "progress", "[1]", "operation 'op1'"),
    ("operations", "progress", "[" * 100_000, "operation 'op1'"),
    ("operations", "step", "one", "operation 'op1'"),
    ("operations", "stage", b"running", "operation 'op1'"),
    ("plans", "changes", "{", "plan 'p1'"),
    ("plans", "changes", '[{"app": 1}]', "plan 'p1'"),
    ("plans", "created_at", "noon", "plan 'p1'"),
    ("config", "text", b"[stacks]", "the applied config"),
    ("holder", "epoch", "three", "the holder"),
    ("retired", "generation", "four", "a retired instance"),
    ("starts_after_stop", "key", b"s/a/0", "a wanted start"),
    ("start_waits", "deadline", "soon", "a wanted start's wait"),
    ("start_waits", "kind", b"order", "a wanted start's wait"),
])
def test_a_damaged_row_is_state_corrupt_naming_it_and_the_way_out(
        store: BackendStore, table: str, column: str, value: Any, named: str) -> None:
    READS[table](store)   # reads as written
    store.db.execute(f"UPDATE {table} SET {column} = ?", (value,))
    with pytest.raises(StateCorrupt) as err:
        READS[table](store)
    assert err.value.msg == f"backend.db: {named} cannot be read; {DAMAGED}"
    assert err.value.data == {"what": named}
