"""backend.db's saved instances as a starting generation reads them (BackendStore.
instances, then adoption): a damaged row is left out and named in the log, the others
are read; adoption then rebuilds what runs from the owner's inventory."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from backend.store import BackendStore


@pytest.mark.parametrize("damaged", [
    "{not json", "[1, 2]", '"text"', "[" * 100_000,
    # another instance's wire: it would claim s/a/0's launch, and a stop of s/a/1
    # would have stopped s/a/0's process
    '{"stack": "s", "app": "a", "instance": 0}',
    '{"stack": ["s"], "app": "a", "instance": 1}',   # raised TypeError at adoption
    '{"stack": "s", "app": "a", "instance": "1"}', '{"app": "a", "instance": 1}'])
def test_a_damaged_saved_instance_is_left_out_and_named(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, damaged: str) -> None:
    os.chmod(tmp_path, 0o700)
    store = BackendStore(str(tmp_path / "backend.db"))
    try:
        store.save_instances({"s/a/0": {"stack": "s", "app": "a", "instance": 0}}, {})
        store.db.execute("INSERT INTO instances VALUES ('s/a/1', ?)", (damaged,))
        with caplog.at_level(logging.WARNING, logger="tenure.backend"):
            assert store.instances() == {"s/a/0": {"stack": "s", "app": "a", "instance": 0}}
        assert "ignoring unreadable saved instance 's/a/1'" in caplog.text
    finally:
        store.close()
