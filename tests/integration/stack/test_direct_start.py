"""`tenure up` starts the owner and the guardian straight from the release their records
name, verified by the command line as their own start would verify it, instead of
starting the installed code only for it to exec into that release. Whatever the direct
start cannot do (a record that names no installed release) goes through the installed
code, which decides, verifies and reports as it always did."""

from __future__ import annotations

from pathlib import Path

from guardian.start import HASHED_ENV
from owner.release import OwnerRelease, save

FIRST_STAGE = {"owner": "the owner continues from release",
               "guardian": "the guardian continues from release"}


def _logs(cluster) -> dict[str, str]:
    return {name: cluster.log(name) for name in FIRST_STAGE}


def test_up_starts_both_daemons_from_their_release_directly(cluster):
    cluster.up()
    with cluster.guardian() as g:
        st = g.call("status")
    release = st["selector"]["current"]
    assert st["guardian_release"]["running"] == release
    with cluster.owner() as o:
        assert o.call("status")["release"] == {"running": release, "error": None}
    for name, text in _logs(cluster).items():
        assert FIRST_STAGE[name] not in text, (name, text)
    # the tree's identity handed to the guardian (guardian.start.hashed_env) stayed there
    backend_env = Path(f"/proc/{cluster.backend_pid()}/environ").read_bytes()
    assert HASHED_ENV.encode() not in backend_env


def test_a_record_the_direct_start_cannot_follow_goes_through_the_installed_code(cluster):
    cluster.up()
    cluster.down()
    missing = "ab" * 32   # a release id that is not installed
    save(str(cluster.layout.owner_release), OwnerRelease(missing))
    cluster.up()
    with cluster.owner() as o:
        release = o.call("status")["release"]
    # the installed owner ran: it tried to follow, could not, and says why
    assert release["running"] is None
    assert release["error"]["code"] == "NOT_FOUND" and missing in release["error"]["msg"]
    assert "runs the installed code" in _logs(cluster)["owner"]
    assert cluster.status()["owner_link"]["state"] == "connected"   # and serves
