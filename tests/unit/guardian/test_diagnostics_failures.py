"""supervisor-state.json that cannot be written: the guardian says so once for a run of
the same failure, without a traceback for an expected error, and once more when a write
succeeds again (was: a traceback every write, ~10 MB of guardian.log in minutes); and a
guardian refuses to start on one that is not its own to replace (check_diagnostics).
The real coordinator over a fake world (guardian.testing)."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from guardian.diagnostics import check_diagnostics
from guardian.testing import FakeCoordinator
from protocol.errors import UnsafePath


def test_a_failing_write_is_logged_once_and_its_recovery_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        co = FakeCoordinator(tmp_path)
        try:
            path = Path(co.paths.diagnostics)
            co.write_diagnostics()
            elsewhere = tmp_path / "elsewhere.json"
            path.rename(elsewhere)
            path.symlink_to(elsewhere)
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="tenure.guardian"):
                for _ in range(50):
                    co.write_diagnostics()
                failed = list(caplog.records)
                assert len(failed) == 1, [r.getMessage() for r in failed]
                assert failed[0].levelno == logging.ERROR and failed[0].exc_info is None
                assert f"could not write {path}: UNSAFE_PATH: {path} is a symlink" in \
                    failed[0].getMessage()
                caplog.clear()
                path.unlink()
                for _ in range(3):
                    co.write_diagnostics()
                assert [r.getMessage() for r in caplog.records] == [f"wrote {path} again"]
                assert co.status()["kind"] == "tenure-supervisor-state"
                caplog.clear()
                path.unlink()
                path.symlink_to(elsewhere)
                co.write_diagnostics()   # failing anew after a success: said again
                assert len(caplog.records) == 1
        finally:
            await co.cancel_tasks()
            co.state.close()
    asyncio.run(main())


def test_check_diagnostics_refuses_what_is_not_ours_to_replace(tmp_path: Path) -> None:
    path = tmp_path / "supervisor-state.json"
    check_diagnostics(str(path))            # absent: the first start writes it
    path.write_text("{}\n")
    os.chmod(path, 0o600)
    check_diagnostics(str(path))
    os.chmod(path, 0o620)
    with pytest.raises(UnsafePath, match="is open to other users"):
        check_diagnostics(str(path))
    path.unlink()
    target = tmp_path / "target.json"
    target.write_text("{}\n")
    path.symlink_to(target)
    with pytest.raises(UnsafePath) as caught:
        check_diagnostics(str(path))
    assert caught.value.msg.startswith(f"{path} is a symlink")
    assert caught.value.data == {"path": str(path)}
    path.unlink()
    os.mkdir(path)
    with pytest.raises(UnsafePath, match="is not a regular file"):
        check_diagnostics(str(path))


def test_a_write_arranged_before_close_is_made_at_close_and_none_after(tmp_path: Path,
                                                                      caplog) -> None:
    """A write `soon` arranged during the guardian's shutdown fired in the loop's own
    shutdown, after state.db closed, and logged a traceback."""
    import asyncio

    from guardian.diagnostics import DELAY_S, Diagnostics
    closed = {"state": False}

    def build() -> dict:
        if closed["state"]:
            raise RuntimeError("Cannot operate on a closed database.")
        return {"kind": "tenure-supervisor-state", "format": 1}

    async def main() -> None:
        d = Diagnostics(str(tmp_path / "supervisor-state.json"), build)
        d.soon()
        d.close()                       # written now, not DELAY_S later
        assert (tmp_path / "supervisor-state.json").exists()
        closed["state"] = True          # what the guardian closes next
        d.soon()
        d.write()
        await asyncio.sleep(DELAY_S * 2)
    asyncio.run(main())
    assert "Traceback" not in caplog.text and "could not write" not in caplog.text


def test_status_says_what_the_guardian_knows_when_the_file_cannot_be_written(
        tmp_path: Path) -> None:
    """On a full disk the write failed and status read the last file back: a backend
    gone and a recovery blocked since were shown alive and ready."""
    from guardian.testing import run_on
    from protocol.errors import RecoveryBlocked

    async def go(co: FakeCoordinator) -> None:
        co.write_diagnostics()
        assert co.status()["blocked"] is None
        path = Path(co.paths.diagnostics)
        path.unlink()
        path.mkdir()                     # every later write fails
        co.blocked = {"reason": RecoveryBlocked("the disk is full").msg, "next": "x"}
        co.write_diagnostics()
        assert co.status()["blocked"]["reason"] == "the disk is full"
        path.rmdir()
    run_on(tmp_path, go)
