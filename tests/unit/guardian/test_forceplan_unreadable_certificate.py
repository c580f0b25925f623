"""A recovery.db that is not a database (a damaged disk, a file copied over it) holds
only a certificate, which a backend writes again: it reads as no certificate marked
damaged, saying the way out, so recovery blocks with that reason and a forced recovery
can still be reviewed (`tenure backend recover --dry-run`). Was: StateCorrupt from the
reader, and the dry run failed STATE_CORRUPT with no way out. Fake owner."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

from guardian.cold import recovery_check
from guardian.coordinator import Coordinator
from guardian.forceplan import force_plan
from guardian.recovery import read_certificate
from guardian.testing import FakeCoordinator, run_on

WAY_OUT = "move recovery.db aside"


def _garbage(path: str | os.PathLike[str]) -> None:
    with open(path, "wb") as f:
        f.write(b"this is not a database, just a file that took its place" * 100)
    os.chmod(path, 0o600)


@pytest.mark.parametrize("content", [b"not a database" * 100, b"SQLite format 3\0" + b"x" * 4000,
                                     b""])
def test_a_file_that_is_no_database_is_no_certificate_marked_damaged(tmp_path: Path,
                                                                     content: bytes):
    os.chmod(tmp_path, 0o700)
    path = tmp_path / "recovery.db"
    path.write_bytes(content)
    os.chmod(path, 0o600)
    cert = read_certificate(str(path))
    assert cert["valid"] is False and cert["body"] is None
    assert "not a readable database" in cert["damaged"] and WAY_OUT in cert["damaged"]


def test_recovery_blocks_and_the_dry_run_reviews_a_forced_recovery(tmp_path: Path):
    async def body(co: FakeCoordinator) -> None:
        co.certificate = types.MethodType(Coordinator.certificate, co)  # type: ignore[method-assign]
        _garbage(co.paths.recovery_db)
        await co.connect_owner()
        co.world.inventory = [{"launch_key": "s/a/0/1", "stack": "s", "app": "a",
                               "instance": 0, "pid": 4242, "start_ticks": 7}]
        check = await recovery_check(co)
        assert not check.ok and check.reason.startswith(
            "the recovery certificate cannot be read: ") and WAY_OUT in check.reason
        plan = await force_plan(co)          # was: StateCorrupt
        assert plan["covered"] is False and plan["reason"] == check.reason
        assert plan["certificate"]["valid"] is False
        assert [r["pid"] for r in plan["adopt"]] == [4242]
    os.chmod(tmp_path, 0o700)
    run_on(tmp_path, body)
