"""`tenure guardian upgrade` with real releases: the guardian moves to another release by
exec (same pid, same lock), the backend generation and every app keep their pids; a
restarted guardian follows its release; a new guardian that dies before it confirmed is
undone at the next start; a release whose guardian cannot read the state is refused
before anything moves; an unreadable record stops the guardian with exit status 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import _rmtree, config, derive_release, install

from protocol.procfs import running


@dataclass
class Releases:
    newer: Path          # works like the sealed release, another id
    unreadable: Path     # its guardian reads state.db format 2 only: preflight fails
    version_99: Path     # works like the sealed release, says it is tenure 99.0.0


@pytest.fixture(scope="module")
def releases(sealed_release: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Releases]:
    d = tmp_path_factory.mktemp("guardian-releases")
    out = Releases(d / "newer", d / "unreadable", d / "v99")
    derive_release(sealed_release, out.newer,
                   {"guardian/__init__.py": lambda t: t + "\n# guardian B\n"})
    derive_release(sealed_release, out.unreadable, {"guardian/state.py": lambda t: t.replace(
        "\nFORMAT = 1\n", "\nFORMAT = 2\n", 1)})
    derive_release(sealed_release, out.version_99,
                   {"backend/__init__.py": lambda t: t + "\n# 99\n"}, tenure_version="99.0.0")
    yield out
    _rmtree(d)


def _guardian(cluster) -> dict:
    with cluster.guardian() as g:
        return g.call("status")


def _up(cluster) -> tuple[dict, int]:
    cluster.up(config(sleepers=2))
    cluster.wait_ready(2)
    return cluster.pids(), cluster.backend_pid()


def test_the_guardian_moves_to_a_release_keeping_its_pid_the_backend_and_the_apps(
        cluster, releases):
    pids, backend = _up(cluster)
    before = _guardian(cluster)
    first = before["selector"]["current"]       # a fresh home: the guardian runs it too
    assert (before["guardian_release"]["state"], before["guardian_release"]["running"]) == \
        ("selected", first)
    rid = install(cluster, releases.newer)

    plan = cluster.cli("guardian", "upgrade", rid, "--check", check=True).out
    assert (plan["changed"], plan["restarting"], plan["from"]) == (True, False, first)
    assert _guardian(cluster)["guardian"] == before["guardian"]     # --check moved nothing

    done = cluster.cli("guardian", "upgrade", rid, check=True).out
    after = _guardian(cluster)
    assert after["guardian"]["pid"] == before["guardian"]["pid"]
    assert after["guardian"]["instance"] != before["guardian"]["instance"]
    assert after["guardian_release"] == {
        "running": rid, "release": rid, "state": "selected", "previous": first,
        "reverted": None, "error": None}
    assert done["guardian"]["instance"] == after["guardian"]["instance"]
    assert cluster.backend_pid() == backend and cluster.pids() == pids
    assert f"runs release {rid}" in cluster.cli_text("guardian", "status")
    again = cluster.cli("guardian", "upgrade", rid, check=True).out
    assert (again["changed"], again["restarting"]) == (False, False)

    # the backend is still this process's child: its death is seen, reaped, recovered
    os.kill(backend, signal.SIGKILL)
    cluster.wait(lambda: cluster.backend_pid() != backend, 60, "a recovered backend")
    assert not psutil.pid_exists(backend) or \
        psutil.Process(backend).status() != psutil.STATUS_ZOMBIE
    assert cluster.pids() == pids


def test_a_restarted_guardian_follows_the_release_it_moved_to(cluster, releases):
    pids, _ = _up(cluster)
    rid = install(cluster, releases.newer)
    cluster.cli("guardian", "upgrade", rid, check=True)
    first = _guardian(cluster)["guardian"]
    _stop_guardian(first)
    cluster.up()     # starts the guardian of rid, the release its record selects
    st = _guardian(cluster)
    assert st["guardian_release"]["running"] == rid
    assert st["guardian_release"]["state"] == "selected"
    assert st["guardian"]["pid"] != first["pid"]
    cluster.wait_ready(2)
    assert cluster.pids() == pids


def test_a_new_guardian_that_dies_before_it_confirmed_is_undone_at_the_next_start(
        cluster, releases):
    cluster.env["TENURE_GUARDIAN_FAULT"] = "trial.boot:kill-guardian"
    pids, backend = _up(cluster)
    first = _guardian(cluster)["guardian_release"]["running"]
    rid = install(cluster, releases.newer)
    res = cluster.cli("guardian", "upgrade", rid)
    assert res.code == 1 and res.out["error"]["code"] == "GUARDIAN_UPGRADE_FAILED", res
    assert "exited before it confirmed" in res.out["error"]["msg"]
    assert cluster.pids() == pids                      # nothing touched the apps

    cluster.up()
    st = _guardian(cluster)["guardian_release"]
    assert (st["running"], st["state"], st["release"]) == (first, "selected", first)
    assert st["reverted"]["release"] == rid
    assert "did not become ready" in st["reverted"]["reason"]
    assert cluster.backend_pid() == backend            # the orphaned backend was adopted
    assert cluster.pids() == pids
    text = cluster.cli_text("guardian", "status")
    assert f"went back from release {rid[:12]}: it did not become ready" in text


def test_a_release_whose_guardian_cannot_read_the_state_is_refused_before_moving(
        cluster, releases):
    pids, backend = _up(cluster)
    before = _guardian(cluster)["guardian"]
    rid = install(cluster, releases.unreadable)
    for extra in (["--check"], []):
        res = cluster.cli("guardian", "upgrade", rid, *extra)
        err = res.out["error"]
        assert res.code == 1 and err["code"] == "GUARDIAN_UPGRADE_FAILED", res
        assert err["data"]["step"] == "preflight"
        assert "this guardian reads 'tenure-guardian' format 2" in err["data"]["stderr"]
    st = _guardian(cluster)
    assert st["guardian"] == before and st["guardian_release"]["running"] != rid
    assert cluster.backend_pid() == backend and cluster.pids() == pids


def test_an_unreadable_guardian_release_record_stops_the_guardian(short_home):
    runtime = short_home / "runtime"
    runtime.mkdir(mode=0o700)
    record = runtime / "guardian-release.json"
    record.write_text('{"kind": "tenure-guardian-release", "format": 1, "trial": "yes"}')
    record.chmod(0o600)
    proc = subprocess.run([sys.executable, "-m", "guardian", "--home", str(short_home)],
                          capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert "trial must be true or false" in proc.stderr


def _stop_guardian(ident: dict) -> None:
    """SIGTERM the guardian this test's cluster started (by pid and start time)."""
    os.kill(ident["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 30
    while running(ident["pid"], ident["start_ticks"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(ident["pid"], ident["start_ticks"])


def test_status_says_when_this_command_line_is_older_than_the_backend(cluster, releases):
    _up(cluster)
    assert cluster.cli("backend", "status", check=True).out["cli"]["older"] is False
    rid = install(cluster, releases.version_99)
    done = cluster.cli("backend", "upgrade", rid, check=True).out
    assert done["activation"]["phase"] == "complete"
    cli = cluster.cli("backend", "status", check=True).out["cli"]
    assert (cli["backend_version"], cli["older"]) == ("99.0.0", True)
    text = cluster.cli_text("backend", "status")
    assert "older than the release the backend runs (99.0.0)" in text


def test_a_backend_that_does_not_answer_refuses_the_move_and_leaves_the_guardian(
        cluster, releases):
    """The new guardian takes the backend over by asking it: with the backend stopped
    the move went ahead and the new guardian exited at its boot, leaving none."""
    pids, backend = _up(cluster)
    before = _guardian(cluster)
    rid = install(cluster, releases.newer)
    os.kill(backend, signal.SIGSTOP)
    try:
        res = cluster.cli("guardian", "upgrade", rid)
    finally:
        os.kill(backend, signal.SIGCONT)
    err = res.out["error"]
    assert res.code == 1 and err["code"] == "GUARDIAN_UPGRADE_FAILED", res
    assert err["data"]["step"] == "backend" and f"kill -CONT {backend}" in err["msg"], err
    after = _guardian(cluster)
    assert after["guardian"] == before["guardian"] and \
        after["guardian_release"]["running"] == before["guardian_release"]["running"]
    assert cluster.backend_pid() == backend and cluster.pids() == pids
