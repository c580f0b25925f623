"""`release.remove` and `release.prune` (guardian.removal): installed releases nothing
needs go, each one that stays is named with why, bad input and unreadable records change
nothing. The real coordinator and service over a fake world (guardian.testing), real
files under a temporary home, a real process for the command-line check."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from guardian import own, removal
from guardian.manifest import DEFAULT_CONTRACTS, RUNTIME_NAME, canonical_json, release_id
from guardian.service import GuardianService
from guardian.testing import FakeCoordinator, run_on
from owner import release as owner_release
from protocol.errors import Conflict, NotFound, StateCorrupt, StorageFailed, TenureError
from protocol.server import Call


def _manifest(n: int) -> bytes:
    return canonical_json({
        "format": 1, "tenure_version": f"0.1.{n}", "source_commit": None,
        "interpreter": {"path": "/usr/bin/python3.11", "version": "3.11.7",
                        "sha256": "a" * 64},
        "files": {"lib/protocol/__init__.py": "b" * 64},
        "contracts": dict(DEFAULT_CONTRACTS)})


def _install(co: FakeCoordinator, n: int, record: bool = True) -> str:
    """A release directory (RUNTIME.json and one file, read-only as installed ones are),
    recorded in state.db as installed when ``record``."""
    data = _manifest(n)
    rid = release_id(data)
    root = Path(co.paths.releases) / rid
    (root / "lib" / "protocol").mkdir(parents=True)
    (root / "lib" / "protocol" / "__init__.py").write_bytes(b"x" * 1000)
    (root / RUNTIME_NAME).write_bytes(data)
    for d in (root / "lib" / "protocol", root / "lib", root):
        os.chmod(d, 0o555)
    if record:
        co.state.add_release(rid)
    return rid


def _service(co: FakeCoordinator) -> GuardianService:
    return GuardianService(co, lambda: None)


def _call(params: dict[str, Any]) -> Call:
    return Call("release.prune", params, None, 1, None)  # type: ignore[arg-type]


async def _prune(co: FakeCoordinator, keep: int = 3, dry_run: bool = False) -> Any:
    return await _service(co).release_prune(_call({"keep": keep, "dry_run": dry_run}))


async def _remove(co: FakeCoordinator, rid: str, dry_run: bool = False) -> Any:
    return await _service(co).release_remove(_call({"release": rid, "dry_run": dry_run}))


def _left(co: FakeCoordinator) -> set[str]:
    return set(os.listdir(co.paths.releases))


def _run(tmp_path: Path, fn: Callable[[FakeCoordinator], Any]) -> Any:
    return run_on(tmp_path, fn)


def test_prune_keeps_the_newest_and_what_is_needed(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> Any:
        r = [_install(co, n) for n in range(6)]
        co.state.select(r[1], co.state.selector().revision)
        co.state.select(r[0], co.state.selector().revision)   # r[1] is previous now
        answer = await _prune(co, keep=2)
        return r, answer, _left(co), co.state.releases()
    r, answer, left, known = _run(tmp_path, go)
    assert [x["release"] for x in answer["removed"]] == sorted([r[2], r[3]])
    assert all(x["bytes"] > 1000 and x["status"] == "ok" for x in answer["removed"])
    assert answer["bytes"] == sum(x["bytes"] for x in answer["removed"])
    kept = {x["release"]: x["why"] for x in answer["kept"]}
    assert kept == {r[0]: ["it is the selected release"],
                    r[1]: ["it is the previous release (a rollback starts it)"],
                    r[4]: ["one of the 2 newest installed"],
                    r[5]: ["one of the 2 newest installed"]}
    assert left == {r[0], r[1], r[4], r[5]}
    assert known == [r[0], r[1], r[4], r[5]]        # forgotten in state.db too
    assert answer["dry_run"] is False


def test_a_dry_run_removes_nothing(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> Any:
        r = [_install(co, n) for n in range(3)]
        before = _left(co)
        answer = await _prune(co, keep=0, dry_run=True)
        one = await _remove(co, r[0], dry_run=True)
        return r, answer, one, before, _left(co), co.state.releases()
    r, answer, one, before, after, known = _run(tmp_path, go)
    assert sorted(x["release"] for x in answer["removed"]) == sorted(r)
    assert answer["dry_run"] is True and one["dry_run"] is True
    assert [x["release"] for x in one["removed"]] == [r[0]]
    assert after == before and known == r


def test_releases_state_db_does_not_know_count_as_the_oldest(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> Any:
        recorded = [_install(co, n) for n in range(2)]
        unknown = _install(co, 9, record=False)    # installed by an older guardian
        answer = await _prune(co, keep=2)
        return recorded, unknown, answer
    recorded, unknown, answer = _run(tmp_path, go)
    assert [x["release"] for x in answer["removed"]] == [unknown]
    assert {x["release"] for x in answer["kept"]} == set(recorded)


def test_leftovers_go_and_foreign_entries_stay(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> Any:
        rid = _install(co, 1)
        releases = Path(co.paths.releases)
        left = releases / f"{rid}.tmp-0badc0ffee00"
        (left / "lib").mkdir(parents=True)
        (left / "lib" / "half").write_bytes(b"y" * 50)
        os.chmod(left / "lib", 0o555)                  # as an install leaves it
        sig = releases / f".{rid}.sig.tmp-0badc0ffee00"  # a signature attached, cut short
        sig.write_bytes(b"s" * 7)
        os.chmod(sig, 0o444)
        (releases / "notes.txt").write_text("someone's\n")
        answer = await _prune(co, keep=1)
        return rid, [sig.name, left.name], answer, _left(co)
    rid, leftovers, answer, left = _run(tmp_path, go)
    assert answer["removed"] == [{"release": name, "status": "incomplete", "bytes": size}
                                 for name, size in zip(leftovers, (7, 50), strict=True)]
    assert left == {rid, "notes.txt"}


def test_a_corrupt_release_nothing_needs_goes(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> Any:
        good, bad = _install(co, 1), _install(co, 2)
        runtime = Path(co.paths.releases) / bad / RUNTIME_NAME
        os.chmod(runtime.parent, 0o755)
        runtime.write_bytes(b"{}")
        return good, bad, await _prune(co, keep=0)
    good, bad, answer = _run(tmp_path, go)
    assert {(x["release"], x["status"]) for x in answer["removed"]} == \
        {(good, "ok"), (bad, "corrupt")}


@pytest.mark.parametrize("need", ["selected", "previous", "guardian", "owner", "owner-back",
                                  "certificate", "generation"])
def test_what_is_needed_is_refused_by_name(tmp_path: Path, need: str) -> None:
    """Each reason a release stays: `remove` refuses it (CONFLICT, the reason in its
    message and data) and leaves it installed; a prune keeping none keeps it."""
    async def go(co: FakeCoordinator) -> Any:
        rid, other = _install(co, 1), _install(co, 2)
        if need in ("selected", "previous"):
            co.state.select(rid, co.state.selector().revision)
            if need == "previous":
                co.state.select(other, co.state.selector().revision)
        elif need == "guardian":
            co.own = own.Running(None, own.Pointer(release=rid))
        elif need in ("owner", "owner-back"):
            key = "release" if need == "owner" else "previous"
            Path(co.paths.owner_release).parent.mkdir(mode=0o700, exist_ok=True)
            Path(co.paths.owner_release).write_text(json.dumps(
                {"kind": owner_release.KIND, "format": 1, "release": None,
                 "previous": None, key: rid}))
            os.chmod(co.paths.owner_release, 0o600)
        elif need == "certificate":
            co.world.certificate = {"valid": True, "body": {"release": rid}}
        else:
            co.candidate = co.world.spawn(rid)  # type: ignore[assignment]
        try:
            await _remove(co, rid)
        except Conflict as exc:
            refused: TenureError | None = exc
        else:
            refused = None
        return rid, refused, _left(co), await _prune(co, keep=0)
    rid, refused, left, pruned = _run(tmp_path, go)
    assert refused is not None and refused.data["release"] == rid
    assert rid in left
    why = {x["release"]: x["why"] for x in pruned["kept"]}[rid]
    assert refused.msg == f"release {rid[:12]} stays: {'; '.join(why)}"
    assert len(why) == 1 and why[0] in {
        "selected": "it is the selected release",
        "previous": "it is the previous release (a rollback starts it)",
        "guardian": "the guardian's record names it",
        "owner": "the owner's record names it",
        "owner-back": "the owner goes back to it",
        "certificate": "the recovery certificate was written by it",
        "generation": "a backend generation of the guardian runs it"}[need]


def test_a_process_started_from_a_release_keeps_it(tmp_path: Path) -> None:
    """The command line of a backend names its release's lib/: a process whose command
    line names the release's directory keeps it, whatever the records say."""
    async def go(co: FakeCoordinator) -> Any:
        rid, free = _install(co, 1), _install(co, 2)
        lib = Path(co.paths.releases) / rid / "lib"
        proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()",
                                 f"sys.path.insert(0, '{lib}')"], stdin=subprocess.PIPE)
        try:
            # right after the fork /proc/PID/cmdline is still the parent's (or empty)
            cmdline = Path(f"/proc/{proc.pid}/cmdline")
            deadline = time.monotonic() + 10
            while str(lib).encode() not in cmdline.read_bytes() and \
                    time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            found = removal.running_from(Path(co.paths.releases))
            try:
                await _remove(co, rid)
            except Conflict as exc:
                refused = exc.msg
            pruned = await _prune(co, keep=0)
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(10)
        return rid, free, found, refused, pruned
    rid, free, found, refused, pruned = _run(tmp_path, go)
    assert rid in found and free not in found
    assert refused == f"release {rid[:12]} stays: a process runs from it"
    assert [x["release"] for x in pruned["removed"]] == [free]


def test_an_owner_record_of_another_account_is_not_the_guardians_concern(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unreadable for want of permission: that owner runs only copies staged for it
    (through the real file modes: tests/integration/guardian/
    test_owner_record_of_another_account.py)."""
    def denied(path: str, kind: str, *, denied: bool = False) -> Any:
        assert denied, "read_private would turn the PermissionError into UnsafePath"
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(owner_release, "read_json", denied)

    async def go(co: FakeCoordinator) -> Any:
        rid = _install(co, 1)
        return rid, await _remove(co, rid)
    rid, answer = _run(tmp_path, go)
    assert [x["release"] for x in answer["removed"]] == [rid]


def test_a_damaged_owner_record_refuses_and_removes_nothing(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> Any:
        rid = _install(co, 1)
        Path(co.paths.owner_release).parent.mkdir(mode=0o700, exist_ok=True)
        Path(co.paths.owner_release).write_text(json.dumps(
            {"kind": owner_release.KIND, "format": 1, "release": "not-an-id"}))
        os.chmod(co.paths.owner_release, 0o600)
        errors = []
        for attempt in (_remove(co, rid), _prune(co, keep=0)):
            try:
                await attempt
            except StateCorrupt as exc:
                errors.append(exc.msg)
        return rid, errors, _left(co)
    rid, errors, left = _run(tmp_path, go)
    assert len(errors) == 2 and all("release is not a release id" in e for e in errors)
    assert left == {rid}


def test_removing_what_is_not_installed_says_so(tmp_path: Path) -> None:
    async def go(co: FakeCoordinator) -> Any:
        await _remove(co, "c" * 64)
    with pytest.raises(NotFound, match=f"release {'c' * 64} is not installed"):
        _run(tmp_path, go)


def test_a_removal_the_disk_refuses_is_reported_with_what_was_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_rename = os.rename
    renames = []

    def rename(src: Any, dst: Any) -> None:
        renames.append(src)
        if len(renames) == 2:
            raise OSError(5, "Input/output error")
        real_rename(src, dst)
    monkeypatch.setattr(os, "rename", rename)

    async def go(co: FakeCoordinator) -> Any:
        r = [_install(co, n) for n in range(2)]
        try:
            await _prune(co, keep=0)
        except StorageFailed as exc:
            return r, exc, _left(co), co.state.releases()
        raise AssertionError("the failed rename was not reported")
    r, exc, left, known = _run(tmp_path, go)
    first, second = sorted(r)
    assert exc.data == {"release": second, "removed": [first]}
    assert exc.msg.startswith(f"removing {second} failed (OSError: [Errno 5] Input/output "
                              "error)")
    assert left == {second} and known == [second]


def test_the_service_refuses_a_bad_keep() -> None:
    from guardian.service import S_PRUNE
    from protocol.errors import BadRequest
    with pytest.raises(BadRequest, match=r"params\.keep must be a count from 0 to 10000"):
        S_PRUNE.validate({"keep": -1})
    assert S_PRUNE.validate({}) == {"keep": removal.DEFAULT_KEEP, "dry_run": False}


def test_a_generation_that_ended_needs_its_release_no_more(tmp_path: Path) -> None:
    """The coordinator keeps the incumbent of the last handoff after it retired: its
    release is needed while its process lives, not after."""
    async def go(co: FakeCoordinator) -> Any:
        rid = _install(co, 1)
        incumbent = co.world.spawn(rid)
        co.incumbent = incumbent  # type: ignore[assignment]
        held = (await removal.needed(co)).get(rid)
        incumbent.die(0)
        return rid, held, await _remove(co, rid)
    rid, held, answer = _run(tmp_path, go)
    assert held == ["a backend generation of the guardian runs it"]
    assert [x["release"] for x in answer["removed"]] == [rid]


def test_an_activation_that_has_not_ended_keeps_both_its_releases(tmp_path: Path) -> None:
    """An upgrade cut short by the guardian's death: its next boot completes or undoes
    it, with the candidate's release or the one it came from."""
    from guardian.phases import Kind, Phase

    async def go(co: FakeCoordinator) -> Any:
        new, old, done = _install(co, 1), _install(co, 2), _install(co, 3)
        cut = co.state.create_activation(Kind.UPGRADE, new, old, 1)
        ended = co.state.create_activation(Kind.UPGRADE, done, old, 1)
        co.state.advance(ended.id, Phase.CREATED, Phase.ABORTED)
        pruned = await _prune(co, keep=0)
        return cut.id, new, old, done, pruned
    aid, new, old, done, pruned = _run(tmp_path, go)
    why = {x["release"]: x["why"] for x in pruned["kept"]}
    assert why == {new: [f"activation {aid} has not ended (created)"],
                   old: [f"activation {aid} has not ended (created): it may go back to it"]}
    assert [x["release"] for x in pruned["removed"]] == [done]


def test_a_removal_is_no_handoff_and_a_dry_run_takes_no_lease(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a removal runs, status does not say a handoff is in progress; a dry run
    beside another guardian command answers instead of OPERATION_IN_PROGRESS."""
    from protocol.errors import OperationInProgress
    real = removal.remove
    held: list[bool] = []

    async def spy(co: Any, removals: Any) -> Any:
        held.append(co.command_lock.locked())
        return await real(co, removals)
    monkeypatch.setattr(removal, "remove", spy)

    async def go(co: FakeCoordinator) -> Any:
        rid = _install(co, 1)
        async with co.command_lock:          # an upgrade, say
            dry = await _prune(co, keep=0, dry_run=True)
            try:
                await _prune(co, keep=0)
            except OperationInProgress as exc:
                refused = exc.msg
        done = await _remove(co, rid)
        return rid, dry, refused, done
    rid, dry, refused, done = _run(tmp_path, go)
    assert [x["release"] for x in dry["removed"]] == [rid]
    assert refused == "another command runs (release prune refused)"
    assert [x["release"] for x in done["removed"]] == [rid] and held == [False]


def test_an_activation_that_ended_uncertain_or_blocked_keeps_nothing(tmp_path: Path) -> None:
    """Such an activation waits for the operator, whose recovery starts the selected
    release: once recovered, nothing ever moves it on, and its releases must not stay
    for ever."""
    from guardian.phases import Kind, Phase

    async def go(co: FakeCoordinator) -> Any:
        a, b = _install(co, 1), _install(co, 2)
        act = co.state.create_activation(Kind.UPGRADE, a, b, 1)
        co.state.advance(act.id, Phase.CREATED, Phase.UNCERTAIN)
        return a, b, await _prune(co, keep=0)
    a, b, pruned = _run(tmp_path, go)
    assert sorted(x["release"] for x in pruned["removed"]) == sorted([a, b])


@pytest.mark.parametrize("command", ["upgrade", "rollback", "release remove"])
def test_a_command_beside_a_running_prune_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    """Was: a removal holds the lease but not the command lock, and the guardian took
    its own lease again: an upgrade beside a prune went on, and the prune, planned
    before it, removed the release the upgrade had just selected. Now any command of
    this guardian is refused while another runs, and the next one after it goes on."""
    from protocol.errors import OperationInProgress
    real, entered, go_on = removal.remove, asyncio.Event(), asyncio.Event()

    async def slow(co: Any, removals: Any) -> Any:
        entered.set()
        await go_on.wait()
        return await real(co, removals)
    monkeypatch.setattr(removal, "remove", slow)

    async def go(co: FakeCoordinator) -> Any:
        old, rid = _install(co, 1), _install(co, 2)
        co.state.select(old, co.state.selector().revision)
        co.state.select(rid, co.state.selector().revision)
        service = _service(co)
        prune = asyncio.ensure_future(_prune(co, keep=0))
        await entered.wait()
        attempt = {"upgrade": lambda: service.upgrade(Call(
                       "upgrade", {"release": old, "check": False}, None, 1, None)),  # type: ignore[arg-type]
                   "rollback": lambda: service.rollback(Call(
                       "rollback", {}, None, 1, None)),  # type: ignore[arg-type]
                   "release remove": lambda: _remove(co, old)}[command]
        with pytest.raises(OperationInProgress) as refused:
            await attempt()
        lease = co.state.lease()
        go_on.set()
        await prune
        return refused.value, lease, co.state.lease(), co.commanding
    refused, during, after, commanding = _run(tmp_path, go)
    assert refused.msg == f"release prune runs ({command} refused)"
    assert refused.data == {"purpose": "release prune"}
    assert during is not None and during["purpose"] == "release prune"
    assert after is None and commanding is None
