"""What `tenure up` hands a guardian it starts from a verified release (guardian.start):
the identity of the tree it hashed, in an environment variable the guardian takes out of
its environment at once and trusts only as the memo of that one tree (a changed file
has another identity and is hashed in full: tests/integration/guardian/test_release.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian import start
from guardian.own import Pointer, save
from guardian.paths import GuardianPaths

RID = "ab" * 32
IDENTITY = bytes(range(32))


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GuardianPaths:
    monkeypatch.delenv(start.HASHED_ENV, raising=False)
    p = GuardianPaths(tmp_path)
    p.runtime.mkdir(mode=0o700)
    return p


def test_the_guardian_keys_the_given_identity_under_the_release_it_runs(
        paths: GuardianPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start.own, "running_release", lambda releases: RID)
    monkeypatch.setenv(start.HASHED_ENV, IDENTITY.hex())
    assert start.hashed_memo(paths) == {str(paths.releases / RID): IDENTITY}
    assert start.HASHED_ENV not in start.os.environ      # no child inherits it


@pytest.mark.parametrize("given", [None, "", "zz" * 32, IDENTITY.hex()[:-2], "0" * 66])
def test_anything_else_is_no_memo(paths: GuardianPaths, monkeypatch: pytest.MonkeyPatch,
                                  given: str | None) -> None:
    monkeypatch.setattr(start.own, "running_release", lambda releases: RID)
    if given is not None:
        monkeypatch.setenv(start.HASHED_ENV, given)
    assert start.hashed_memo(paths) == {}


def test_the_installed_code_takes_no_memo(paths: GuardianPaths,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start.own, "running_release", lambda releases: None)
    monkeypatch.setenv(start.HASHED_ENV, IDENTITY.hex())
    assert start.hashed_memo(paths) == {}
    assert start.HASHED_ENV not in start.os.environ


def test_up_passes_the_identity_of_the_selected_release_only(paths: GuardianPaths) -> None:
    save(paths.guardian_release, Pointer(RID))
    assert start.hashed_env(paths, {str(paths.releases / RID): IDENTITY}) == \
        {start.HASHED_ENV: IDENTITY.hex()}
    assert start.hashed_env(paths, {str(paths.releases / ("cd" * 32)): IDENTITY}) == {}
    assert start.hashed_env(paths, {}) == {}
