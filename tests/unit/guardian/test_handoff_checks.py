"""What a handoff's ``checked`` phase must refuse while nothing is touched, and what an
activation whose restore fails must still say. Fake owner and generations
(guardian.testing): the real coordinator, phase tables, state.db and receipts.

- the owner contracts the candidate's code asks for (its preflight report), not only
  those its RUNTIME.json declares: otherwise the candidate found out when it attached,
  after the fence, and the upgrade was rolled back;
- the release to roll back to (the incumbent's) must be installed and verify: otherwise
  a candidate that failed after the fence left no generation at all (``uncertain``);
- the backend's state paths (the home, backend/, backend.db, recovery.db) must be ones a
  generation starts on: otherwise the incumbent was retired, the candidate and the
  restore were both refused (UNSAFE_PATH) and the activation ended ``uncertain``;
- an activation whose restore failed keeps the failure that made it restore.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from guardian.handoff import upgrade
from guardian.selection import check_release, missing_contracts, reported_contracts
from guardian.service import GuardianService
from guardian.testing import FakeCoordinator, run_on
from guardian.trust import verified_release
from protocol.durable import open_sqlite
from protocol.errors import BadSignature, CapabilityMissing, NotFound, StateCorrupt
from protocol.handover import OWNER_CONTRACTS

OLD, NEW = "a" * 64, "b" * 64
NEEDS_9 = {**OWNER_CONTRACTS, "stackControl": 9}   # in code only, not in RUNTIME.json


def run(fn: Callable[[FakeCoordinator], Awaitable[Any]], home: Path) -> Any:
    return run_on(home, fn)


async def in_control(co: FakeCoordinator) -> Any:
    """Release OLD's generation in control, as after a completed first start."""
    await co.connect_owner()
    return await co.boot_generation(OLD)


def report_of(contracts: Any) -> dict[str, Any]:
    return {"ok": True, "contracts": contracts, "python": "3.11"}


def code_asks(co: FakeCoordinator, contracts: Any, via: str = "preflight") -> None:
    """Make NEW's code ask the owner for ``contracts``, as its preflight process reports
    or (``via="standby"``) its standby's report says."""
    async def preflight(release: Any, deadline: float | None = None) -> dict[str, Any]:
        return {"elapsed": 0.0, "exit_status": 0, "report": report_of(contracts)}
    co.preflight = preflight  # type: ignore[method-assign]
    if via == "standby":
        async def standby(rid: str, verified: Any = None, warm: Any = None) -> Any:
            bp = co.world.spawn(rid)
            bp.report = report_of(contracts)
            return bp
        co.standby = standby  # type: ignore[method-assign]


def assert_untouched(co: FakeCoordinator, incumbent: Any, epoch: int,
                     result: dict[str, Any]) -> None:
    """Ended in ``checked``: nothing drained, fenced or started; the incumbent serves."""
    assert [r["phase"] for r in result["receipts"]] == ["created", "aborted"]
    assert co.world.epoch == epoch and co.world.alive() == [incumbent]
    assert not incumbent.draining
    assert "generation.drain" not in co.world.calls
    assert co.state.selector().current == OLD


@pytest.mark.parametrize("via", ["preflight", "standby"])
@pytest.mark.parametrize("check_only", [False, True])
def test_a_contract_only_the_candidates_code_asks_for_aborts_in_checked(
        tmp_path: Path, via: str, check_only: bool) -> None:
    """Regression: `upgrade --check` said check-only and the upgrade went to the fence,
    retired the incumbent and rolled back (the candidate's attach was refused)."""
    async def go(co: FakeCoordinator) -> None:
        incumbent = await in_control(co)
        code_asks(co, NEEDS_9, via)
        epoch = co.world.epoch
        result = await upgrade(co, NEW, check_only=check_only)
        act = result["activation"]
        assert (act["phase"], act["outcome"], act["code"]) == (
            "aborted", "aborted", "CAPABILITY_MISSING"), act
        assert act["error"] == "the owner lacks stackControl@9 that the candidate requires"
        assert result["receipts"][-1]["detail"]["missing"] == {"stackControl": 9}
        assert_untouched(co, incumbent, epoch, result)
    run(go, tmp_path)


def test_malformed_contracts_in_the_report_abort_in_checked(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        incumbent = await in_control(co)
        code_asks(co, {"stackControl": "9"})
        epoch = co.world.epoch
        result = await upgrade(co, NEW)
        assert (result["activation"]["phase"], result["activation"]["code"]) == (
            "aborted", "STATE_CORRUPT")
        assert_untouched(co, incumbent, epoch, result)
    run(go, tmp_path)


def test_selecting_a_release_whose_code_needs_a_missing_contract_selects_nothing(
        tmp_path: Path) -> None:
    """`release select` with no backend running checks as `checked` does."""
    async def go(co: FakeCoordinator) -> None:
        await co.connect_owner()
        co.state.add_release(OLD)
        co.state.select(OLD, co.state.selector().revision)
        code_asks(co, NEEDS_9)
        with pytest.raises(CapabilityMissing) as err:
            await check_release(co, co.release(NEW))
        assert err.value.data == {"missing": {"stackControl": 9}}
        call: Any = SimpleNamespace(params={"release": NEW, "start": True})
        with pytest.raises(CapabilityMissing):
            await GuardianService(co, lambda: None).release_select(call)
        assert co.state.selector().current == OLD and co.state.activations(1) == []
        assert co.world.generations == []
    run(go, tmp_path)


def test_both_declarations_of_the_contracts_must_be_met() -> None:
    """RUNTIME.json and the code may disagree: the owner must meet each of them."""
    rel: Any = SimpleNamespace(id=NEW, contracts={"stackControl": 2, "notify": 1})
    pre = {"report": report_of({"stackControl": 9})}
    assert missing_contracts(rel, {"stackControl": 2, "notify": 1}, pre) == \
        {"stackControl": 9}
    assert missing_contracts(rel, {"stackControl": 9, "notify": 1}, pre) == \
        {"stackControl": 2}
    assert missing_contracts(rel, {"stackControl": 2}, None) == {"notify": 1}
    assert reported_contracts({"report": {"ok": True}}) == {}   # an older release
    for bad in ([1], {"stackControl": True}, {"stackControl": 2.0}):
        with pytest.raises(StateCorrupt):
            reported_contracts({"report": report_of(bad)})


def really_verify(co: FakeCoordinator, rid: str) -> None:
    """Verify release ``rid`` as the guardian does (the fake trusts every release)."""
    fake = co.release

    def release(release_id: str) -> Any:
        if release_id == rid:
            return verified_release(co.paths, release_id, co.hashed)
        return fake(release_id)
    co.release = release  # type: ignore[method-assign]


@pytest.mark.parametrize(("damage", "code"), [("deleted", "NOT_FOUND"),
                                              ("no manifest", "STATE_CORRUPT")])
@pytest.mark.parametrize("check_only", [False, True])
def test_an_upgrade_that_could_not_roll_back_is_refused_in_checked(
        tmp_path: Path, damage: str, code: str, check_only: bool) -> None:
    """Regression: with the incumbent's release deleted, a candidate that exited before
    READY ended `uncertain` past the fence with no backend (NOT_FOUND from the restore)."""
    async def go(co: FakeCoordinator) -> None:
        incumbent = await in_control(co)
        really_verify(co, OLD)
        if damage == "no manifest":
            os.makedirs(co.paths.releases / OLD)
        co.world.start_fault = "crash"     # the candidate would exit before READY
        epoch = co.world.epoch
        result = await upgrade(co, NEW, check_only=check_only)
        act = result["activation"]
        assert (act["phase"], act["code"]) == ("aborted", code), act
        assert act["error"].startswith(f"release {OLD}, the one to roll back to if the "
                                       "handoff fails after the fence, cannot be restored")
        assert "`tenure release install` it again" in act["error"]
        assert result["receipts"][-1]["detail"]["rollback_target"] == OLD
        assert_untouched(co, incumbent, epoch, result)
        assert co.blocked is None
    run(go, tmp_path)


def test_an_unsigned_rollback_target_is_said_with_how_to_sign_it(tmp_path: Path) -> None:
    """With trusted release keys set, an unsigned rollback target was told to be
    installed again, which cannot help: the same unsigned copy would be refused."""
    async def go(co: FakeCoordinator) -> None:
        incumbent = await in_control(co)
        fake = co.release

        def release(release_id: str) -> Any:
            if release_id == OLD:
                raise BadSignature(f"{release_id}: release is not signed",
                                   {"file": "RUNTIME.json.sig", "release": release_id})
            return fake(release_id)
        co.release = release  # type: ignore[method-assign]
        epoch = co.world.epoch
        result = await upgrade(co, NEW, check_only=True)
        act = result["activation"]
        assert (act["phase"], act["code"]) == ("aborted", "BAD_SIGNATURE"), act
        assert "install a copy of it signed by a trusted key (docs/releases.md" \
            in act["error"] and "`tenure release install` it again" not in act["error"]
        assert_untouched(co, incumbent, epoch, result)
    run(go, tmp_path)


def _damage(co: FakeCoordinator, damage: str) -> tuple[str, str]:
    """Make one of the backend's state paths unsafe; (the path, what the error says)."""
    paths = co.paths
    for db in (paths.backend_db, paths.recovery_db):
        open_sqlite(db, "test", 1, "CREATE TABLE t (x)").close()
    if damage == "backend.db 0644":
        os.chmod(paths.backend_db, 0o644)
        return paths.backend_db, (f"{paths.backend_db} is open to other users (mode 0644); "
                                  "find out who changed it, then chmod 600 it")
    if damage == "recovery.db symlink":
        moved = str(paths.home / "elsewhere.db")
        os.rename(paths.recovery_db, moved)
        os.symlink(moved, paths.recovery_db)
        return paths.recovery_db, f"{paths.recovery_db} is a symlink"
    if damage == "recovery.db 0660":
        os.chmod(paths.recovery_db, 0o660)
        return paths.recovery_db, f"{paths.recovery_db} is open to other users (mode 0660)"
    target = str(paths.home if damage == "home 0777" else paths.backend)
    os.chmod(target, 0o777 if damage == "home 0777" else 0o755)
    mode = "0777" if damage == "home 0777" else "0755"
    return target, f"{target} has mode {mode}; it must be 0700: find out who changed it, " \
        "then chmod 700 it"


@pytest.mark.parametrize("damage", ["backend.db 0644", "recovery.db symlink",
                                    "recovery.db 0660", "home 0777", "backend/ 0755"])
@pytest.mark.parametrize("check_only", [False, True])
def test_state_a_generation_would_refuse_aborts_in_checked(
        tmp_path: Path, damage: str, check_only: bool) -> None:
    """Regression: `upgrade --check` said check-only with backend.db at 0644 (or the home
    at 0777); the upgrade retired the incumbent, the candidate and then the restore were
    refused with UNSAFE_PATH, and it ended `uncertain` with no backend."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)

    async def go(co: FakeCoordinator) -> None:
        incumbent = await in_control(co)
        path, said = _damage(co, damage)
        before = os.lstat(path)
        co.world.calls.clear()
        epoch = co.world.epoch
        result = await upgrade(co, NEW, check_only=check_only)
        act = result["activation"]
        assert (act["phase"], act["outcome"], act["code"]) == (
            "aborted", "aborted", "UNSAFE_PATH"), act
        assert act["error"].startswith(said), act
        assert act["error"].endswith("A backend generation would refuse to start on it, "
                                     "so the handoff did not begin and nothing was "
                                     "changed; retry once it is put right"), act
        assert result["receipts"][-1]["detail"]["path"] == path
        assert_untouched(co, incumbent, epoch, result)
        # checked before anything was asked: only the resume every abort sends
        assert co.world.calls == ["generation.resume"]
        assert co.world.generations == [incumbent]    # no standby, no preflight process
        after = os.lstat(path)                        # refused, never repaired
        assert (stat.S_IMODE(after.st_mode), after.st_ino) == (
            stat.S_IMODE(before.st_mode), before.st_ino)
        assert co.blocked is None
        os.chmod(home, 0o700)
        os.chmod(co.paths.backend, 0o700)
        if os.path.islink(co.paths.recovery_db):
            os.replace(home / "elsewhere.db", co.paths.recovery_db)
        for db in (co.paths.backend_db, co.paths.recovery_db):
            os.chmod(db, 0o600)
        result = await upgrade(co, NEW, check_only=check_only)
        assert result["activation"]["phase"] == "complete", result["activation"]
    run(go, home)


def test_a_failed_restore_keeps_the_candidates_failure(tmp_path: Path) -> None:
    """Regression: the activation said only NOT_FOUND (the release to restore was gone);
    why the candidate failed was in the guardian's log alone."""
    async def go(co: FakeCoordinator) -> dict[str, Any]:
        await in_control(co)
        fake = co.release

        def release(rid: str) -> Any:     # deleted once the check passed
            if rid == OLD and "owner.fence" in co.world.calls:
                raise NotFound(f"{co.paths.releases / OLD}: no such release")
            return fake(rid)
        co.release = release  # type: ignore[method-assign]
        co.world.calls.clear()
        co.world.start_fault = "crash"
        result: dict[str, Any] = await upgrade(co, NEW)
        assert co.world.alive() == []
        return result
    result = run(go, tmp_path)
    act = result["activation"]
    assert (act["phase"], act["code"]) == ("uncertain", "NOT_FOUND"), act
    assert act["error"].startswith("the handoff failed: HANDOFF_FAILED: backend exited")
    assert f"then restoring release {OLD} failed: NOT_FOUND: " in act["error"]
    assert act["error"].endswith(f"releases/{OLD}: no such release")
    last = result["receipts"][-1]
    assert last["phase"] == "uncertain"
    assert last["detail"]["cause"]["code"] == "HANDOFF_FAILED"
    assert "HANDOFF_FAILED" in last["detail"]["error"] and \
        "NOT_FOUND" in last["detail"]["error"]


def test_an_unreadable_checkpoint_keeps_the_failure_that_needed_it(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> dict[str, Any]:
        await in_control(co)
        real_point = co.point

        def point(name: str) -> None:
            if name == "launch":
                act = co.state.activations(1)[0]
                Path(co.paths.checkpoint_file(act.id)).write_text("{not json")
            real_point(name)
        co.point = point  # type: ignore[method-assign]
        co.world.start_fault = "timeout"
        result: dict[str, Any] = await upgrade(co, NEW)
        return result
    act = run(go, tmp_path)["activation"]
    assert (act["phase"], act["code"]) == ("uncertain", "STATE_CORRUPT"), act
    assert act["error"].startswith("the handoff failed: BACKEND_START_TIMEOUT: ")
    assert "then reading the checkpoint to restore from failed: STATE_CORRUPT" in \
        act["error"]
