"""The guardian's flows over a fake owner and fake generations (guardian.testing): every
failure path of a handoff, a cold start, recovery and boot, in milliseconds.

Each test drives the real coordinator, phase tables, state.db, grants, receipts, handoff
records and checkpoints; only processes and sockets are fake."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from guardian import cold, diagnostics
from guardian.cold import recover_safely, start_selected, watch_owner
from guardian.faults import InjectedFault
from guardian.handoff import POINTS, upgrade
from guardian.phases import FINAL, Kind, Phase, ending
from guardian.testing import FakeCoordinator, run_on
from protocol.errors import (
    BackendStartTimeout,
    Conflict,
    ConnectFailed,
    RequestTimedOut,
    StateCorrupt,
    TenureError,
    TransportLost,
    UnsafePath,
)
from protocol.identity import new_identity

OLD, NEW = "a" * 64, "b" * 64


def run(fn: Callable[[FakeCoordinator], Awaitable[Any]], home: Path) -> Any:
    return run_on(home, fn)


async def in_control(co: FakeCoordinator) -> Any:
    await co.connect_owner()
    co.world.inventory = [{"stack": "s", "app": "a", "instance": 0, "generation": 1,
                           "launch_key": "k1", "pid": 500, "start_ticks": 9, "restarts": 0,
                           "state": "ready"}]
    return await co.boot_generation(OLD)


async def recover(co: FakeCoordinator) -> Any:
    """Recover as the guardian's callers do: holding the command lock, so the
    recovery a generation's unexpected exit starts waits for this one."""
    async with co.command_lock:
        return await recover_safely(co)


def assert_valid_end(co: FakeCoordinator, act: dict[str, Any]) -> None:
    """Exactly one generation answers holding the owner's epoch, or the ending is
    uncertain and none acts; no epoch was ever granted twice."""
    assert Phase(act["phase"]) in FINAL, act
    alive = co.world.alive()
    if act["phase"] == "uncertain":
        assert alive == [], alive
    else:
        assert len(alive) == 1, alive
        assert alive[0].epoch == co.world.epoch
        assert co.world.grant == {"epoch": co.world.epoch, "activation": alive[0].activation}
    epochs = [r[0] for r in co.state.db.execute("SELECT epoch FROM grants")]
    assert len(epochs) == len(set(epochs))


def test_candidate_that_hangs_before_ready_is_rolled_back(tmp_path: Path) -> None:
    """Regression: BackendStartTimeout (a builtin TimeoutError before) left `retired`."""
    async def go(co: FakeCoordinator) -> Any:
        await in_control(co)
        co.world.start_fault = "timeout"
        return await upgrade(co, NEW)
    result = run(go, tmp_path)
    act = result["activation"]
    assert (act["phase"], act["code"]) == ("rolled_back", "BACKEND_START_TIMEOUT"), act
    phases = [r["phase"] for r in result["receipts"]]
    assert phases[-3:] == ["fenced", "retired", "rolled_back"]


@pytest.mark.parametrize("standby", [True, False])
def test_the_pause_verifies_the_release_only_without_a_warm_standby(
        tmp_path: Path, standby: bool) -> None:
    """A standby was verified when it started and runs already; a cold start verifies
    the release again right before it starts it (in the pause)."""
    async def go(co: FakeCoordinator) -> list[str]:
        await in_control(co)
        verified: list[str] = []
        real_release, real_standby = co.release, co.standby

        def release(rid: str) -> Any:   # runs in a thread: only note it
            verified.append(rid)
            return real_release(rid)

        async def no_standby(rid: str, verified: Any = None, warm: Any = None) -> Any:
            return None
        co.release = release  # type: ignore[method-assign]
        co.standby = real_standby if standby else no_standby  # type: ignore[method-assign]
        assert (await upgrade(co, NEW))["activation"]["phase"] == "complete"
        return [rid for rid in verified if rid == NEW]   # (the check reads OLD's too)
    # once in the check; a cold start once more, in launch
    assert run(go, tmp_path) == [NEW] * (1 if standby else 2)


def test_hung_candidate_restores_previous_release_under_fresh_epoch(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> Any:
        await in_control(co)
        before = co.world.epoch
        co.world.start_fault = "timeout"
        await upgrade(co, NEW)
        restore = co.state.activations(1)[0]
        assert restore.kind is Kind.RESTORE and restore.phase is Phase.COMPLETE
        assert co.world.epoch == before + 2          # candidate's, then the restore's
        (alive,) = co.world.alive()
        assert alive.release == OLD and alive.activation == restore.id
        assert co.state.selector().current == OLD
        assert_valid_end(co, co.state.activations(2)[1].to_wire())
    run(go, tmp_path)


@pytest.mark.parametrize("point", [p for p in POINTS if not p.startswith("restore.")])
def test_unexpected_exception_at_every_point_ends_as_its_phase_requires(
        tmp_path: Path, point: str) -> None:
    async def go(co: FakeCoordinator) -> None:
        await in_control(co)
        co.fault.spec = f"{point}:raise"
        result = await upgrade(co, NEW)
        act = result["activation"]
        reached = Phase(result["receipts"][-2]["phase"])
        assert act["phase"] == ending(Kind.UPGRADE, reached), (point, result["receipts"])
        assert act["code"] == "GUARDIAN_FAULT" and "InjectedFault" in act["error"]
        assert_valid_end(co, act)
        (alive,) = co.world.alive()
        assert not alive.draining                  # an aborted handoff resumed it
    run(go, tmp_path)


@pytest.mark.parametrize("point", ["restore.fence", "restore.launch", "restore.verify"])
def test_a_failing_restore_ends_uncertain_with_no_generation_acting(
        tmp_path: Path, point: str) -> None:
    async def go(co: FakeCoordinator) -> None:
        await in_control(co)
        co.world.start_fault = "crash"
        co.fault.spec = f"{point}:raise"
        act = (await upgrade(co, NEW))["activation"]
        assert act["phase"] == "uncertain", act
        assert co.world.alive() == []
        assert co.blocked is not None and co.blocked["activation"] == act["id"]
        restore = co.state.activations(1)[0]
        assert (restore.kind, restore.phase) == (Kind.RESTORE, Phase.UNCERTAIN)
    run(go, tmp_path)


def test_the_fence_takes_the_owner_epoch_the_check_asked_for(tmp_path: Path) -> None:
    """The fence needs the owner's epoch: the check's status gives it, so nothing is
    asked of the owner between the drain and the fence."""
    async def go(co: FakeCoordinator) -> None:
        await in_control(co)
        epoch = co.world.epoch
        co.world.calls.clear()
        act = (await upgrade(co, NEW))["activation"]
        assert (act["phase"], act["epoch"]) == ("complete", epoch + 1), act
        assert co.world.calls[:1] == ["owner.status"]   # the check
        drained = co.world.calls.index("generation.drain")
        assert co.world.calls[drained:drained + 3] == [
            "generation.drain", "generation.checkpoint", "owner.fence"]
        assert co.world.calls.count("owner.status") == 1
    run(go, tmp_path)


def test_lost_fence_call_never_reuses_the_incumbents_epoch(tmp_path: Path) -> None:
    """Regression: a failed fence let the activation reach `fenced` with last_epoch().
    (It failed at its question for the owner's epoch then; a handoff's fence takes that
    from the check now, so here the fence call itself fails, before it took effect.)"""
    async def go(co: FakeCoordinator) -> None:
        incumbent = await in_control(co)
        epoch = co.world.epoch
        co.world.fail["fence"] = [TransportLost("reset")]
        act = (await upgrade(co, NEW))["activation"]
        assert act["phase"] == "aborted" and act["epoch"] is None, act
        assert co.world.epoch == epoch and co.world.alive() == [incumbent]
        assert not incumbent.draining
    run(go, tmp_path)


@pytest.mark.parametrize("silent", [
    RequestTimedOut("status: no answer in time", request_id=7),
    ConnectFailed("handshake with owner.sock failed: no answer within 5 s")])
def test_an_owner_that_does_not_answer_ends_the_upgrade_before_anything_changes(
        tmp_path: Path, silent: TenureError) -> None:
    """Regression: with a stopped owner an upgrade waited for the owner connection's
    60 s, then said only "status: no answer in time". The check asks with a 5 s limit,
    and the error says what /proc shows of the owner's pid (here: the test's own)."""
    async def go(co: FakeCoordinator) -> None:
        incumbent = await in_control(co)
        epoch = co.world.epoch
        co.world.fail["status"] = [silent]
        pid = os.getpid()
        co.owner_identity = new_identity(pid)
        act = (await upgrade(co, NEW))["activation"]
        assert (act["phase"], act["code"]) == ("aborted", silent.code_str), act
        assert act["error"] == (f"the owner did not answer within 5 s: pid {pid} runs "
                                f"(state R) but did not answer. Nothing was changed")
        assert ("status", 5.0) in co.owner_timeouts
        assert co.world.epoch == epoch and co.world.alive() == [incumbent]
        assert not incumbent.draining
    run(go, tmp_path)


def test_fence_answer_lost_after_the_owner_accepted_proceeds_on_proof(tmp_path: Path
                                                                      ) -> None:
    async def go(co: FakeCoordinator) -> None:
        await in_control(co)
        co.world.fail["fence"] = ["lose"]
        act = (await upgrade(co, NEW))["activation"]
        assert act["phase"] == "complete", act
        assert act["epoch"] == co.world.epoch == co.state.grant_for(act["id"])
        assert_valid_end(co, act)
    run(go, tmp_path)


def test_fence_frame_landing_after_abort_is_detected_and_repaired(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        incumbent = await in_control(co)
        co.world.fail["fence"] = ["late"]
        act = (await upgrade(co, NEW))["activation"]
        assert act["phase"] == "aborted"
        co.world.land_late()          # the owner now holds the aborted activation's grant
        assert co.world.grant is not None and co.world.grant["activation"] == act["id"]
        co.world.certificate = _certificate(co, incumbent)
        task = asyncio.create_task(watch_owner(co))
        for _ in range(400):
            await asyncio.sleep(0.005)
            if co.world.alive() and co.world.alive()[0] is not incumbent:
                break
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        (alive,) = co.world.alive()
        assert alive is not incumbent and not incumbent.alive()
        assert co.world.grant == {"epoch": co.world.epoch, "activation": alive.activation}
        assert co.state.activations(1)[0].kind is Kind.RECOVER
    run(go, tmp_path)


def _certificate(co: FakeCoordinator, bp: Any) -> dict[str, Any]:
    from guardian.recovery import digest
    return {"valid": True, "body": {
        "activation": bp.activation, "epoch": bp.epoch, "release": bp.release,
        "owner": co.world.identity.to_wire(), "inventory_digest": digest(co.world.inventory),
        "launches": len(co.world.inventory), "cursor": 3, "config_revision": "rev-1"}}


def _crash(co: FakeCoordinator, bp: Any) -> None:
    co.world.certificate = _certificate(co, bp)
    bp.die()


def test_recovery_from_a_covering_certificate(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        bp = await in_control(co)
        _crash(co, bp)
        act = await recover(co)
        assert act is not None and (act.kind, act.phase) == (Kind.RECOVER, Phase.COMPLETE)
        assert_valid_end(co, act.to_wire())
    run(go, tmp_path)


@pytest.mark.parametrize("change, reason", [
    ("release", "another release"),
    ("epoch", "never issued"),
    ("owner", "another owner"),
    ("inventory", "inventory differs"),
])
def test_recovery_refuses_what_the_certificate_does_not_cover(
        tmp_path: Path, change: str, reason: str) -> None:
    async def go(co: FakeCoordinator) -> None:
        bp = await in_control(co)
        _crash(co, bp)
        body = co.world.certificate["body"]
        if change == "release":
            body["release"] = NEW
        elif change == "epoch":
            body["epoch"] += 7
        elif change == "owner":
            body["owner"] = {**body["owner"], "instance": "owner-2"}
        else:
            co.world.inventory = [*co.world.inventory, dict(co.world.inventory[0], launch_key="k2")]
        assert await recover(co) is None
        assert co.blocked is not None and reason in co.blocked["reason"]
        last = co.state.activations(1)[0]
        assert (last.kind, last.phase, last.code) == (Kind.RECOVER, Phase.BLOCKED,
                                                      "RECOVERY_BLOCKED")
        assert co.world.alive() == []
    run(go, tmp_path)


def test_a_damaged_certificate_blocks_recovery_and_a_forced_one_can_be_reviewed(
        tmp_path: Path) -> None:
    """A certificate whose body cannot be read is no certificate: recovery blocks saying
    so, and the forced recovery's plan (the operator's way out) is still made. Raising
    there would have left no way out but editing recovery.db."""
    from backend.store import RecoveryStore
    from guardian.forceplan import force_plan
    from guardian.recovery import read_certificate
    where = tmp_path / "cert"
    where.mkdir(mode=0o700)
    path = str(where / "recovery.db")
    RecoveryStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE certificate SET valid = 1, body = '{', updated_at = 1")
    db.close()

    async def go(co: FakeCoordinator) -> dict[str, Any]:
        bp = await in_control(co)
        _crash(co, bp)
        co.certificate = lambda: read_certificate(path)  # type: ignore[method-assign]
        assert await recover(co) is None
        assert co.blocked is not None
        assert "the recovery certificate cannot be read" in co.blocked["reason"]
        return await force_plan(co)
    plan = run(go, tmp_path)
    assert plan["certificate"]["valid"] is False and plan["covered"] is False
    assert [r["launch_key"] for r in plan["adopt"]] == ["k1"]


def test_recovery_refuses_a_certificate_older_than_a_completed_generation(
        tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        first = await in_control(co)
        co.world.certificate = _certificate(co, first)
        first.die()
        async with co.command_lock:       # as the guardian's callers hold it
            second = await start_selected(co)     # not admitted by that certificate
        assert second.phase is Phase.COMPLETE
        co.world.api.die()   # type: ignore[union-attr]  # crashed before certifying
        assert await recover(co) is None
        assert co.blocked is not None and "stale" in co.blocked["reason"]
    run(go, tmp_path)


def test_a_recovery_and_a_handoff_carry_the_certificate_forward(tmp_path: Path) -> None:
    """Regression (seen under systemd): recover, then upgrade, then a crash before the
    new generation certified; both took over exactly the certified world."""
    async def go(co: FakeCoordinator) -> None:
        first = await in_control(co)
        _crash(co, first)
        recovered = await recover(co)
        assert recovered is not None and recovered.phase is Phase.COMPLETE
        assert (await upgrade(co, NEW))["activation"]["phase"] == "complete"
        co.world.certificate["body"]["release"] = NEW
        co.world.api.die()   # type: ignore[union-attr]
        again = await recover(co)
        assert again is not None and again.phase is Phase.COMPLETE, co.blocked
        created = co.state.receipts(again.id)[0]["detail"]
        assert created["certified_by"] == first.activation
    run(go, tmp_path)


def test_recovery_retries_with_backoff_then_records_blocked(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        bp = await in_control(co)
        _crash(co, bp)

        async def always_timeout(bp: Any) -> None:
            bp.die()
            raise BackendStartTimeout("test: hangs")
        co.world.start = always_timeout  # type: ignore[method-assign]
        told, sleep = [], co.sleep

        async def watched_sleep(delay: float) -> None:   # what status says meanwhile
            told.append(co.status()["recovery_failing"])
            await sleep(delay)
        co.sleep = watched_sleep  # type: ignore[method-assign]
        assert await recover(co) is None
        assert co.slept == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
        assert [(f["attempt"], f["attempts"]) for f in told] == [(n, 7) for n in range(1, 7)]
        assert all(f["error"] == "BACKEND_START_TIMEOUT: test: hangs" for f in told)
        assert co.recovery_failing is None and co.status()["recovery_failing"] is None
        assert co.blocked is not None and co.blocked["reason"].endswith("(after 7 attempts)")
        kinds = [(a.kind, a.phase) for a in co.state.activations(8)]
        assert kinds[0] == (Kind.RECOVER, Phase.BLOCKED)
        assert kinds[1:7] == [(Kind.RECOVER, Phase.FAILED)] * 6
        assert co.blocked is not None and co.blocked["code"] == "BACKEND_START_TIMEOUT"
        assert co.world.alive() == []
    run(go, tmp_path)


def test_an_unsafe_path_blocks_recovery_at_once(tmp_path: Path) -> None:
    """Was: retried 7 times over ~60 s (`tenure up` waited as long); a state file that
    is a symlink or open to others stays so until the operator looks."""
    db = str(tmp_path / "backend" / "backend.db")

    async def go(co: FakeCoordinator) -> None:
        bp = await in_control(co)
        _crash(co, bp)

        async def refused(bp: Any) -> None:
            bp.die()
            raise UnsafePath(f"{db} is open to other users (mode 0644)", {"path": db})
        co.world.start = refused  # type: ignore[method-assign]
        assert await recover(co) is None
        assert co.slept == [] and co.recovery_failing is None
        assert co.blocked is not None and co.blocked["code"] == "UNSAFE_PATH", co.blocked
        assert co.blocked["reason"] == f"{db} is open to other users (mode 0644)"
        kinds = [(a.kind, a.phase) for a in co.state.activations(3)]
        assert kinds[:2] == [(Kind.RECOVER, Phase.BLOCKED), (Kind.RECOVER, Phase.FAILED)]
        assert co.world.alive() == []
    run(go, tmp_path)


def test_recover_safely_turns_any_exception_into_a_recorded_block(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        bp = await in_control(co)
        bp.die()

        def broken() -> dict[str, Any]:
            raise KeyError("body")
        co.certificate = broken  # type: ignore[method-assign]
        assert await recover(co) is None
        assert co.blocked is not None and co.blocked["code"] == "GUARDIAN_FAULT"
        last = co.state.activations(1)[0]
        assert last.phase is Phase.BLOCKED and "KeyError" in (last.error or "")
    run(go, tmp_path)


def test_cold_start_failure_after_fence_is_failed_with_its_generation_stopped(
        tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        await co.connect_owner()
        co.state.add_release(OLD)
        co.state.select(OLD, 0)
        co.fault.spec = "start.verify:raise"
        with pytest.raises(Exception) as info:
            await start_selected(co)
        assert info.value.code_str == "GUARDIAN_FAULT"   # type: ignore[attr-defined]
        act = co.state.activations(1)[0]
        assert act.phase is Phase.FAILED and co.world.alive() == []
    run(go, tmp_path)


def test_background_task_that_dies_marks_the_guardian_unhealthy(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        async def boom() -> None:
            raise InjectedFault("test: a watcher broke")
        task = co.spawn(boom(), "test watcher")
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)
        assert co.unhealthy is not None and co.unhealthy["task"] == "test watcher"
        assert co.status()["unhealthy"]["code"] == "GUARDIAN_FAULT"
    run(go, tmp_path)


def test_phase_advance_outside_the_kinds_table_is_refused(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        act = co.state.create_activation(Kind.START, OLD, None, None)
        with pytest.raises(Conflict):
            co.state.advance(act.id, Phase.CREATED, Phase.CHECKED)
        up = co.state.create_activation(Kind.UPGRADE, OLD, None, None)
        with pytest.raises(Conflict):
            co.state.advance(up.id, Phase.CREATED, Phase.FENCED)
    run(go, tmp_path)


def test_unknown_kind_in_state_db_fails_closed(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        act = co.state.create_activation(Kind.START, OLD, None, None)
        co.state.db.execute("UPDATE activations SET kind = 'teleport' WHERE id = ?", (act.id,))
        with pytest.raises(StateCorrupt):
            co.state.activation(act.id)
    run(go, tmp_path)


def test_operator_abort_before_the_fence_resumes_the_incumbent(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> None:
        incumbent = await in_control(co)
        orig = co.world.api_call

        def abort_on_drain(method: str, params: dict[str, Any]) -> Any:
            if method == "generation.drain":
                co.abort_requested = True
            return orig(method, params)
        co.world.api_call = abort_on_drain  # type: ignore[method-assign]
        act = (await upgrade(co, NEW))["activation"]
        assert act["phase"] == "aborted" and "operator" in act["error"]
        assert co.world.alive() == [incumbent] and not incumbent.draining
    run(go, tmp_path)


def test_the_owner_watch_waits_a_bounded_time_and_says_once_that_it_gets_no_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(cold, "WATCH_EVERY_S", 0.01)

    async def go(co: FakeCoordinator) -> None:
        await in_control(co)
        co.owner_timeouts.clear()
        co.world.fail["status"] = [RequestTimedOut("test: no answer")] * 3
        task = asyncio.create_task(watch_owner(co))
        for _ in range(400):
            await asyncio.sleep(0.005)
            if len(co.owner_timeouts) >= 5:
                break
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert set(co.owner_timeouts) == {("status", cold.WATCH_TIMEOUT_S)}
    with caplog.at_level("INFO", logger="tenure.guardian"):
        run(go, tmp_path)
    said = [r.getMessage() for r in caplog.records if "owner" in r.getMessage()]
    assert said == ["owner unreachable: TIMEOUT: test: no answer (asked again every second)",
                    "the owner answers again"], said


def test_a_diagnostics_write_arranged_last_never_runs_against_the_closed_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Regression (a flaky owner-watch test): a write arranged by diagnostics_soon that
    came due while asyncio.run shut down (here: waiting for an executor thread) ran
    against the closed state.db and logged "could not write … closed database"."""
    monkeypatch.setattr(diagnostics, "DELAY_S", 0.02)

    async def go(co: FakeCoordinator) -> None:
        await in_control(co)
        asyncio.get_running_loop().run_in_executor(None, time.sleep, 0.1)
        co.diagnostics_soon()
    with caplog.at_level("ERROR", logger="tenure.guardian"):
        run(go, tmp_path)
    assert [r.getMessage() for r in caplog.records] == []


@pytest.mark.parametrize("damage", [
    "{not json",
    # a record of the right kind whose inventory the verification cannot use (a KeyError
    # and a TypeError there before the checkpoint was read through its strict reader)
    '{"kind": "tenure-checkpoint", "format": 1}',
    '{"kind": "tenure-checkpoint", "format": 1, "from_activation": "a", "owner": '
    '{"instance": "o", "pid": 1, "start_ticks": 1, "boot_id": "b"}, "epoch": 1, '
    '"cursor": 0, "config_revision": "r", "instances": [], "inventory": [false], '
    '"operations": [], "written_at": 0}'])
def test_a_checkpoint_unreadable_at_verification_ends_the_handoff_validly(
        tmp_path: Path, damage: str) -> None:
    """The guardian reads the checkpoint for the verification only (after the candidate
    started, outside the pause): unreadable or malformed there, the handoff fails
    closed."""
    async def go(co: FakeCoordinator) -> Any:
        await in_control(co)
        real_point = co.point

        def point(name: str) -> None:
            if name == "verify":
                act = co.state.activations(1)[0]
                Path(co.paths.checkpoint_file(act.id)).write_text(damage)
            real_point(name)
        co.point = point  # type: ignore[method-assign]
        res = await upgrade(co, NEW)
        assert_valid_end(co, res["activation"])   # uncertain: no generation acts
        return res
    result = run(go, tmp_path)
    act = result["activation"]
    assert (act["phase"], act["code"]) == ("uncertain", "STATE_CORRUPT"), act
    assert "GUARDIAN_FAULT" not in act["error"], act   # no "unexpected KeyError" first
    assert [r["phase"] for r in result["receipts"]][-3:] == ["retired", "started",
                                                             "uncertain"]


def test_a_handoffs_steps_rewrite_the_diagnostics_once_after_them(tmp_path: Path) -> None:
    """Phases that follow one another within diagnostics.DELAY_S (a handoff's pause)
    share one write, made after them: none takes the pause's CPU."""
    async def go(co: FakeCoordinator) -> None:
        written: list[str | None] = []
        real = co.diagnostics.write

        def counted() -> None:
            real()
            written.append((co.status()["last_activation"] or {}).get("phase"))
        co.diagnostics.write = counted  # type: ignore[method-assign]
        act = co.state.create_activation(Kind.UPGRADE, OLD, None, None)
        act = co.advance(act, Phase.CHECKED)
        await asyncio.sleep(0)
        act = co.advance(act, Phase.ADMITTED)
        await asyncio.sleep(diagnostics.DELAY_S / 2)
        assert written == []                    # not between the steps
        await asyncio.sleep(diagnostics.DELAY_S)
        assert written == ["admitted"]          # once, as of the last step
    run(go, tmp_path)


def test_diagnostics_outside_a_loop_are_written_at_once(tmp_path: Path) -> None:
    co = FakeCoordinator(tmp_path)
    try:
        co.diagnostics_soon()
        assert co.status()["kind"] == "tenure-supervisor-state"
    finally:
        co.state.close()

