"""`tenure owner upgrade` when something is wrong, with real processes: a release that no
longer verifies stops nothing (neither its plan nor its window); a new owner that
cannot start is reverted to the release the owner ran before, with the same instances
started again, and the error quotes that owner's own last lines; a revert that fails too
says what to do and `--continue` finishes it; a plan made while a window is unfinished
says so."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "guardian"))
from test_handoff_support import _rmtree, derive_release, install

CONFIG = """
[stacks.demo.apps.db]
command = ["sleep", "infinity"]

[stacks.demo.apps.web]
command = ["sleep", "infinity"]
after = ["db"]
"""

STUBBORN = """
[stacks.slow.apps.stubborn]
command = ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"]
stop = { timeout = 4 }
"""

BOOT_ERROR = "test release: this owner cannot start"
UNFENCED = "test release: this owner refuses every fence"


@pytest.fixture(scope="module")
def releases(sealed_release: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[dict[str, Path]]:
    """``good``: another owner release that works; ``broken``: one whose owner raises
    as it starts (before it takes its lock or writes a receipt); ``unfenced``: one whose
    owner starts and answers, but refuses every fence, so no backend attaches to it."""
    d = tmp_path_factory.mktemp("owner-releases")
    derive_release(sealed_release, d / "good", {"owner/__init__.py": lambda t: t + "\n# B\n"})
    derive_release(sealed_release, d / "broken", {"owner/__main__.py": lambda t: t.replace(
        "    from .release import follow, serve_args\n",
        f"    raise RuntimeError({BOOT_ERROR!r})\n", 1)})
    derive_release(sealed_release, d / "unfenced", {"owner/service.py": lambda t: t.replace(
        '        grant = self.grants.verify(call.params["grant"])\n',
        f"        raise BadRequest({UNFENCED!r})\n", 1)})
    yield {"good": d / "good", "broken": d / "broken", "unfenced": d / "unfenced"}
    _rmtree(d)


def _pids(cluster: Any) -> dict[str, tuple[str, int | None]]:
    return {k: (a["state"], a["pid"]) for k, a in cluster.apps().items()}


def _owner(cluster: Any) -> dict[str, Any]:
    out: dict[str, Any] = cluster.cli("owner", "status", check=True).out
    return out


def _window(cluster: Any) -> dict[str, Any]:
    rec: dict[str, Any] = json.loads((cluster.home / "execution" / "maintenance.json"
                                      ).read_text())
    return rec


def _tamper(path: Path) -> None:
    """Append a line to a file of an installed (read-only) release tree."""
    os.chmod(path.parent, 0o755)
    os.chmod(path, 0o644)
    with open(path, "a") as f:
        f.write("# x\n")


def test_a_release_that_no_longer_verifies_stops_nothing(cluster, releases):
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    rid = install(cluster, releases["good"])
    reviewed = cluster.cli("owner", "upgrade", rid, "--dry-run", check=True).out
    _tamper(cluster.home / "runtime" / "releases" / rid / "lib" / "backend" / "api.py")
    before, owner = _pids(cluster), _owner(cluster)

    res = cluster.cli("owner", "upgrade", rid, "--dry-run")
    err = res.out["error"]
    assert res.code == 1 and err["code"] == "STATE_CORRUPT", res
    assert f"release {rid} does not verify" in err["msg"] and "api.py" in err["msg"], err

    res = cluster.cli("owner", "upgrade", rid, "--digest", reviewed["digest"])
    err = res.out["error"]
    assert res.code == 1 and err["code"] == "MAINTENANCE_INCOMPLETE", res
    assert (err["data"]["step"], err["data"]["failed"]) == ("planned", "staged"), err
    assert err["data"]["error"]["code"] == "STATE_CORRUPT", err
    assert _pids(cluster) == before
    assert _owner(cluster)["owner"] == owner["owner"]           # still the same owner
    assert _window(cluster)["step"] == "planned"


def test_an_owner_release_that_cannot_start_is_reverted_with_the_same_apps(
        cluster, releases):
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    before, old = _pids(cluster), _owner(cluster)
    log = cluster.home / "logs" / "owner.log"
    earlier = set(log.read_text().splitlines())
    rid = install(cluster, releases["broken"])
    plan = cluster.cli("owner", "upgrade", rid, "--dry-run", check=True).out

    res = cluster.cli("owner", "upgrade", rid, "--digest", plan["digest"])
    err = res.out["error"]
    assert res.code == 1 and err["code"] == "OWNER_UPGRADE_REVERTED", json.dumps(err)
    assert f"release {rid[:12]} could not start" in err["msg"], err
    assert str(log) in err["msg"] and err["data"]["log"] == str(log), err
    assert err["data"]["reverted_to"] == plan["from"] and err["data"]["release"] == rid
    # its own last lines, whole, and none the owners before it wrote
    quoted = err["msg"].split(f"{log}:\n", 1)[1].splitlines()
    assert quoted[0].startswith("Traceback") and BOOT_ERROR in quoted[-1], err
    assert not earlier & set(quoted), err

    owner = _owner(cluster)
    assert owner["owner"]["instance"] != old["owner"]["instance"]
    assert owner["release"] == {"running": plan["from"], "error": None}
    after = _pids(cluster)
    for key, (state, pid) in after.items():
        assert state == "ready" and pid != before[key][1], after
    rec = _window(cluster)
    assert (rec["step"], rec["outcome"]) == ("done", "reverted")
    record = json.loads((cluster.home / "execution" / "owner-release.json").read_text())
    assert (record["release"], record["previous"]) == (plan["from"], rid)
    assert cluster.cli("owner", "upgrade", "--continue").out["error"]["code"] == "NOT_FOUND"
    assert cluster.cli("owner", "upgrade", "--dry-run", check=True).out["from"] == \
        plan["from"]


def test_an_owner_release_the_backend_cannot_attach_to_is_reverted(cluster, releases):
    """Was: the window stopped at `started` with every app down, and `--continue` only
    waited again for a backend that would never attach."""
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    old = _owner(cluster)
    rid = install(cluster, releases["unfenced"])
    plan = cluster.cli("owner", "upgrade", rid, "--dry-run", check=True).out

    # each wait of the window is bounded by --timeout: the backend's wait on the new
    # owner ends it, and the guardian must follow the owner it goes back to at once
    res = cluster.cli("owner", "upgrade", rid, "--digest", plan["digest"], "--timeout",
                      "20", timeout=300)
    err = res.out["error"]
    assert res.code == 1 and err["code"] == "OWNER_UPGRADE_REVERTED", res
    assert f"release {rid[:12]} did not serve the backend" in err["msg"], err
    assert "guardian.log" in err["msg"] and "the backend on the new owner" in err["msg"]
    assert err["data"]["reverted_to"] == plan["from"] and err["data"]["release"] == rid

    owner = _owner(cluster)
    assert owner["owner"]["instance"] != old["owner"]["instance"]
    assert owner["release"] == {"running": plan["from"], "error": None}
    assert all(state == "ready" for state, _ in _pids(cluster).values())
    rec = _window(cluster)
    assert (rec["step"], rec["outcome"]) == ("done", "reverted")
    assert UNFENCED in (cluster.home / "logs" / "guardian.log").read_text()


def test_a_revert_that_fails_too_says_what_to_do_and_continue_finishes_it(
        cluster, releases):
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    rid = install(cluster, releases["broken"])
    plan = cluster.cli("owner", "upgrade", rid, "--dry-run", check=True).out
    lock = cluster.home / "execution" / "owner.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:   # the stopped owner let it go; held here, the previous owner cannot start
        holding = False

        def hold() -> bool:
            nonlocal holding
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                holding = True
            except BlockingIOError:
                pass
            return holding
        follower = cluster.follow("--json", "owner", "upgrade", rid, "--digest",
                                  plan["digest"])
        try:
            cluster.wait(hold, timeout=60, what="the old owner's exit")
        finally:
            out, _ = follower.communicate(timeout=300)
    finally:
        os.close(fd)
    err = json.loads(out)["error"]
    assert follower.returncode == 1 and err["code"] == "MAINTENANCE_INCOMPLETE", out
    assert (err["data"]["step"], err["data"]["failed"]) == ("start_failed", "reverted")
    assert f"release {rid[:12]} could not start" in err["msg"], err
    assert "another owner is running" in err["msg"], err
    assert "no owner runs and 2 planned instances are down" in err["msg"], err
    assert "then: tenure owner upgrade --continue" in err["msg"], err

    res = cluster.cli("owner", "upgrade", "--continue", "--timeout", "60")
    assert res.out["error"]["code"] == "OWNER_UPGRADE_REVERTED", res
    assert _owner(cluster)["release"]["running"] == plan["from"]
    assert all(a["state"] == "ready" for a in cluster.apps().values())


def test_a_plan_made_while_a_window_is_unfinished_says_so(cluster):
    cluster.up(STUBBORN)
    cluster.wait_ready(1)
    plan = cluster.cli("owner", "upgrade", "--dry-run", check=True).out
    res = cluster.cli("owner", "upgrade", "--digest", plan["digest"], "--timeout", "1")
    assert res.out["error"]["data"]["step"] == "staged", res

    again = cluster.cli("owner", "upgrade", "--dry-run", check=True).out
    assert again["unfinished"] == {"step": "staged", "failed": "drained"}, again
    text = cluster.cli_text("owner", "upgrade", "--dry-run")
    assert "a maintenance window is unfinished (stopped after step staged)" in text, text
    assert "tenure owner upgrade --continue finishes it" in text, text
    cluster.cli("owner", "upgrade", "--continue", "--timeout", "60", check=True)
    assert "unfinished" not in cluster.cli_text("owner", "upgrade", "--dry-run")


def test_an_unsigned_release_is_refused_once_release_keys_are_trusted(cluster, releases):
    """Was: with trusted release keys configured, the window verified the owner's copy
    by its hashes alone and moved the owner onto an unsigned release (`release verify`
    of it said BAD_SIGNATURE)."""
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    rid = install(cluster, releases["good"])           # unsigned, installed before keys
    reviewed = cluster.cli("owner", "upgrade", rid, "--dry-run", check=True).out
    keys = cluster.home / "runtime" / "trusted-release-keys"
    fd = os.open(keys, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("ed25519:" + base64.b64encode(bytes(range(32))).decode() + "\n")
    before, owner = _pids(cluster), _owner(cluster)

    res = cluster.cli("owner", "upgrade", rid, "--dry-run")
    assert res.code == 1 and res.out["error"]["code"] == "BAD_SIGNATURE", res
    assert "not signed" in res.out["error"]["msg"], res
    res = cluster.cli("owner", "upgrade", rid, "--digest", reviewed["digest"])
    err = res.out["error"]
    assert res.code == 1 and err["data"]["error"]["code"] == "BAD_SIGNATURE", res
    assert _pids(cluster) == before and _owner(cluster)["owner"] == owner["owner"]


def test_a_window_whose_way_back_does_not_verify_is_refused(cluster, releases):
    """Was: the plan said nothing of the release the owner runs now; a window whose new
    owner could not start went back to it, found it unusable and ended on the installed
    code ('the owner runs the installed code, not A')."""
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    sealed = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    good = install(cluster, releases["good"])
    reviewed = cluster.cli("owner", "upgrade", good, "--dry-run", check=True).out
    cluster.cli("owner", "upgrade", good, "--digest", reviewed["digest"], check=True)
    _tamper(cluster.home / "runtime" / "releases" / good / "lib" / "backend" / "api.py")
    before = _pids(cluster)

    res = cluster.cli("owner", "upgrade", sealed, "--dry-run")
    err = res.out["error"]
    assert res.code == 1 and err["code"] == "STATE_CORRUPT", res
    assert f"the owner's current release {good[:12]}, which the window goes back to" \
        in err["msg"] and "api.py" in err["msg"], err
    assert _pids(cluster) == before
