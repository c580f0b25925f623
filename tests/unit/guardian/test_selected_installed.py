"""A selected (or previous) release whose directory was deleted: the guardian's status
says it is not installed, `backend status` says recovery is unavailable and marks it,
and `release list` still lists it (``missing``). Before, status said ``recovery: ready``
until a crash found out, and the list lost its ``current`` line. Fake owner and
generations (guardian.testing); the release directories are real."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from backend.cli import render
from guardian.handoff import upgrade
from guardian.manifest import RUNTIME_NAME, Interpreter, Runtime, release_id
from guardian.release import ReleaseStatus, summarize
from guardian.service import GuardianService
from guardian.testing import FakeCoordinator, run_on

NOBODY: Any = SimpleNamespace(params={})


def put_release(releases: Path, version: str) -> str:
    """A release directory as far as the cheap check reads it (RUNTIME.json)."""
    data = Runtime(version, None, Interpreter("/usr/bin/python3", "3.11.2", "0" * 64),
                   {"lib/tenure.py": "1" * 64}, {}).encode()
    rid = release_id(data)
    os.makedirs(releases / rid)
    (releases / rid / RUNTIME_NAME).write_bytes(data)
    return rid


def test_the_cheap_status_of_one_release(tmp_path: Path) -> None:
    rid = put_release(tmp_path, "1.0")
    assert summarize(tmp_path, rid).status is ReleaseStatus.OK
    assert summarize(tmp_path, "c" * 64).status is ReleaseStatus.MISSING
    os.makedirs(tmp_path / ("d" * 64))
    corrupt = summarize(tmp_path, "d" * 64)
    assert corrupt.status is ReleaseStatus.CORRUPT and "RUNTIME.json" in str(corrupt.reason)


def status_after_deleting(tmp_path: Path, which: str) -> tuple[dict[str, Any],
                                                              dict[str, Any], str, str]:
    """Upgrade from one release to another, delete ``which`` ("current"/"previous"),
    then ask status and the release list. Returns them and the two release ids."""
    async def go(co: FakeCoordinator) -> tuple[dict[str, Any], dict[str, Any], str, str]:
        old, new = put_release(co.paths.releases, "1.0"), put_release(co.paths.releases,
                                                                       "2.0")
        await co.connect_owner()
        await co.boot_generation(old)
        assert (await upgrade(co, new))["activation"]["phase"] == "complete"
        co.world.certificate = {"valid": True, "updated_at": 1.0, "body": None}
        service = GuardianService(co, lambda: None)
        before = await service.status(NOBODY)
        assert (before["selector"]["current_installed"],
                before["selector"]["previous_installed"]) == (True, True)
        shutil.rmtree(co.paths.releases / (new if which == "current" else old))
        return (await service.status(NOBODY), await service.release_list(NOBODY), old,
                new)

    return run_on(tmp_path, go)  # type: ignore[no-any-return]


def plain(text: str) -> list[str]:
    return [" ".join(re.sub(r"\x1b\[[0-9;]*m", "", x).split()) for x in text.splitlines()]


def test_a_deleted_selected_release_makes_recovery_unavailable(tmp_path: Path) -> None:
    st, listed, old, new = status_after_deleting(tmp_path, "current")
    sel = st["selector"]
    assert (sel["current"], sel["current_installed"]) == (new, False)
    assert (sel["previous"], sel["previous_installed"]) == (old, True)
    assert render.recovery_state(st) == {
        "state": "unavailable", "reason": f"the selected release {new} is not installed: "
        "`tenure release install` it or `tenure release select` another"}
    lines = plain(render.backend("status", st))
    assert f"release: {new} (NOT INSTALLED)" in lines
    assert f"previous: {old}" in lines
    assert listed["releases"] == [
        {"release": r, "status": "missing" if r == new else "ok", "current": r == new,
         "previous": r == old, **({"reason": "not installed"} if r == new else {})}
        for r in sorted((old, new))]


def test_a_deleted_previous_release_is_marked(tmp_path: Path) -> None:
    st, listed, old, new = status_after_deleting(tmp_path, "previous")
    assert (st["selector"]["current_installed"], st["selector"]["previous_installed"]) \
        == (True, False)
    assert render.recovery_state(st)["state"] == "ready"
    lines = plain(render.backend("status", st))
    assert f"previous: {old} (NOT INSTALLED)" in lines and f"release: {new}" in lines
    assert {(x["release"], x["status"], x["previous"]) for x in listed["releases"]} == \
        {(old, "missing", True), (new, "ok", False)}
