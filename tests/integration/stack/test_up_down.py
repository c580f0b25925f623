"""`tenure up` with the demo config, status, a hot upgrade, `tenure down`."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from backend.testing import free_port

# the demo's port may be taken on a busy machine: same config, a free port
DEMO = (Path(__file__).resolve().parents[3] / "examples" / "demo.toml").read_text() \
    .replace("8765", str(free_port()))


def test_up_demo_status_upgrade_down(cluster):
    up = cluster.up(DEMO)
    assert up.out["apply"]["operation"]["outcome"] == "success", up.out["apply"]["operation"]
    apps = cluster.wait_ready(3)
    assert set(apps) == {"demo/web/0", "demo/worker/0", "demo/notifier/0"}
    st = cluster.cli("status", check=True).out
    assert all(a["state"] == "ready" and a["pid"] for a in st["apps"])
    assert st["backend"]["epoch"] >= 1
    before = cluster.pids()
    rel = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    up2 = cluster.cli("backend", "upgrade", rel, check=True).out
    assert up2["activation"]["phase"] == "complete"
    assert [r["phase"] for r in up2["receipts"]] == [
        "created", "checked", "admitted", "draining", "checkpointed", "fenced", "retired",
        "started", "verified", "complete"]
    assert cluster.pids() == before
    # the sealed directory itself (installed again: the same id) and a short id prefix
    by_path = cluster.cli("backend", "upgrade", str(cluster.release), check=True).out
    assert by_path["activation"]["release"] == rel, by_path["activation"]
    by_prefix = cluster.cli("backend", "upgrade", rel[:12], check=True).out
    assert by_prefix["activation"]["release"] == rel
    assert cluster.cli("backend", "upgrade", "nosuch").code == 2   # BAD_REQUEST
    assert cluster.pids() == before
    assert cluster.up(DEMO).out["apply"]["plan"]["changes"] == []  # idempotent
    assert undocumented_paths(cluster.home) == []
    follower = cluster.follow("logs", "-f", "-n", "1", "demo/worker")
    assert follower.stdout is not None
    first = follower.stdout.readline()   # it follows
    down = cluster.down()
    # the follower reads the rest from the journal file and ends (was: exit 3)
    out, err = follower.communicate(timeout=60)
    assert follower.returncode == 0 and err.startswith("tenure: logs: tenure stopped: "
                                                       "reading "), err
    assert (first + out).splitlines()[-1] == logs_after_down(cluster), out
    assert down.ok and down.out["owner"] and down.out["guardian"]
    assert cluster.leftovers() == []
    assert undocumented_paths(cluster.home) == []
    receipt = (cluster.layout.execution / "owner-receipt.json").read_text()
    assert '"state": "clean"' in receipt
    # was: "backend: not available; last activation … upgrade is complete; guardian
    # diagnostics 0s old", as if something had failed
    st = cluster.cli("status")
    assert st.code == 3 and st.out["stopped"]["owner"]["state"] == "clean", st.out
    text = cluster.cli_text("status", expect=3)
    assert text.startswith("backend: not available; tenure is not running (neither the "
                           "guardian nor the owner is): the owner shut down cleanly at ")
    assert text.rstrip().endswith("(applications: 3 stopped). `tenure up` starts it"), text
    # the journal stays readable with tenure down (it ended with BACKEND_UNAVAILABLE)
    assert logs_after_down(cluster).startswith("demo/worker/0: worker line ")


def undocumented_paths(home: Path) -> list[str]:
    """Files under ``home`` that docs/state.md's map does not name. A directory the map
    lists nothing in (a release's tree) is named as a whole; ``NAME.db-wal`` and
    ``-shm`` go with their database; the test's config files (``*.toml`` at the top)
    are not tenure's."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "state.md").read_text()
    tree = doc[doc.index("## Map"):doc.index("## Who writes")].split("```")[1]
    entries: list[tuple[int, str]] = []
    stack: list[str] = []
    for line in tree.splitlines()[2:]:
        m = re.match(r"([│ ]*)[├└]── (.+?)(?:\s{2,}|$)", line)
        if m is not None:
            depth = len(m.group(1)) // 4
            for name in m.group(2).split(", "):
                stack[depth:] = [name]
                entries.append((depth, "".join(stack)))
    named = []
    for i, (depth, path) in enumerate(entries):
        has_children = i + 1 < len(entries) and entries[i + 1][0] > depth
        if has_children:
            continue
        parts = re.split(r"(<[a-z]+>|XXXX|\*)", path)   # the map's wildcards
        pattern = "".join("[^/]+" if i % 2 else re.escape(part)
                          for i, part in enumerate(parts))
        named.append(re.compile(pattern + (".+" if path.endswith("/") else "")))
    found = []
    for path in sorted(p for p in home.rglob("*") if not p.is_dir()):
        rel = re.sub(r"\.db-(wal|shm)$", ".db", path.relative_to(home).as_posix())
        if path.parent == home and path.suffix == ".toml":
            continue
        if not any(p.fullmatch(rel) for p in named):
            found.append(rel)
    return found


def logs_after_down(cluster) -> str:
    """The worker's last line, read from the journal file with tenure down."""
    return cluster.cli_text("logs", "demo/worker", "-n", "1").strip()


def test_status_without_backend_explains_instead_of_hanging(cluster):
    res = cluster.cli("status")
    assert res.code == 3 and res.out["backend"] is None
    assert res.out["stopped"] == {"owner": None}, res.out   # never started here
    cluster.up()
    assert cluster.cli("status").code == 0


def test_up_with_a_config_it_cannot_read_or_parse_starts_nothing(cluster):
    missing = cluster.cli("up", "--config", str(cluster.home / "missing.toml"))
    assert missing.code == 1 and missing.out["error"]["code"] == "CONFIG_INVALID", missing
    bad = cluster.write_config("[stacks.s.apps.a]\ncommand = 3\n", "bad.toml")
    broken = cluster.cli("up", "--config", str(bad))
    assert broken.code == 1 and broken.out["error"]["code"] == "CONFIG_INVALID", broken
    assert "line" in broken.out["error"]["msg"] or broken.out["error"].get("data"), broken
    deep = cluster.write_config("a = " + "[" * 1000 + "]" * 1000 + "\n", "deep.toml")
    nested = cluster.cli("up", "--config", str(deep))   # was a RecursionError traceback
    assert nested.code == 1 and nested.out["error"]["code"] == "CONFIG_INVALID", nested
    assert cluster.leftovers() == []
    assert not Path(cluster.layout.owner_sock).exists()


def test_an_up_whose_owner_cannot_start_leaves_nothing_running(cluster):
    """Was: the guardian started beside the owner stayed, with a standby backend,
    waiting for an owner that had exited (`tenure up` failed all the same)."""
    from owner.paths import OwnerPaths
    cluster.up("[stacks.s.apps.a]\ncommand = [\"sleep\", \"1000\"]\n")
    assert cluster.down().code == 0
    db = OwnerPaths(cluster.home).db
    os.chmod(db, 0o644)                     # the owner refuses its state: UNSAFE_PATH
    up = cluster.cli("up", "--timeout", "60")
    assert up.code != 0, up
    text = up.stderr + str(up.out)
    assert "owner did not come up" in text and "mode 0644" in text, text
    assert "stopped again what this command had started: pid" in text, text
    assert cluster.leftovers() == []
    os.chmod(db, 0o600)
    cluster.up()
    assert cluster.wait_ready(1)


def test_down_stops_a_guardian_that_does_not_answer(cluster, monkeypatch):
    """A busy guardian may not answer `status` in time; `down` finds it by the socket's
    peer credentials instead of leaving it (and its backend) running."""
    from backend.cli import daemons, holders
    cluster.up("[stacks.s.apps.a]\ncommand = [\"sleep\", \"1000\"]\n")
    guardian = int(cluster.cli("backend", "status", check=True).out["guardian"]["pid"])
    os.kill(guardian, signal.SIGSTOP)
    try:
        found = holders.listener(str(cluster.layout.guardian_sock), "guardian")
        assert found is not None and found[0] == guardian
        assert holders.listener(str(cluster.layout.guardian_sock), "owner") is None
    finally:
        os.kill(guardian, signal.SIGCONT)
    from backend.cli import down
    real_ping = daemons.ping
    monkeypatch.setattr(down, "ping", lambda sock, **kw: None if "guardian" in str(sock)
                        else real_ping(sock, **kw))
    out = down.stop_all(cluster.layout)
    assert out["guardian"] is True and out["owner"] is True, out
    assert cluster.leftovers() == []


def _up_one_app(cluster, extra: str = "") -> tuple[int, int, int | None, int, int]:
    """Up with one app: the owner's and the guardian's pids, the owner's start ticks,
    the app's pid and start ticks."""
    from protocol.procfs import start_ticks
    cluster.up("[stacks.s.apps.a]\ncommand = [\"sleep\", \"1000\"]\n" + extra)
    owner, guardian = cluster.daemon_pids()
    [(app, app_ticks)] = cluster.pids().values()
    return owner, guardian, start_ticks(owner), app, app_ticks


def test_down_with_a_stopped_owner_says_it_still_runs_instead_of_succeeding(cluster):
    """Was: `guardian: stopped`, exit 0, with the owner and every app still running."""
    from protocol.procfs import running
    owner, _, ticks, app, app_ticks = _up_one_app(cluster)
    os.kill(owner, signal.SIGSTOP)
    try:
        down = cluster.down()
        assert down.code == 1 and down.out["guardian"] is True, down
        assert down.out["owner"] is False, down
        assert down.out["owner_problem"] == (
            f"it does not answer; pid {owner} is stopped (SIGSTOP or a debugger); SIGTERM "
            f"waits until it is continued (kill -CONT {owner})"), down.out
        assert running(owner, ticks) and running(app, app_ticks)
    finally:
        os.kill(owner, signal.SIGCONT)   # the pending SIGTERM: a clean shutdown
    cluster.wait(lambda: not running(owner, ticks), 30, "the owner's shutdown")
    assert not running(app, app_ticks)
    receipt = (cluster.layout.execution / "owner-receipt.json").read_text()
    assert '"state": "clean"' in receipt


def test_down_with_a_stopped_guardian_leaves_the_owner_and_its_apps_alone(cluster):
    """Was: the owner was stopped under the live backend, which counted the shutdown's
    kills as crashes (restart counts 0 -> 3) and relaunched against a stopping owner."""
    from protocol.procfs import running
    owner, guardian, ticks, app, app_ticks = _up_one_app(cluster, 'restart = "always"\n')
    os.kill(guardian, signal.SIGSTOP)
    try:
        down = cluster.down()
        assert down.code == 1 and down.out["guardian"] is False, down
        assert down.out["owner"] is False and "backend" not in down.out, down
        assert down.out["owner_problem"] == (
            f"not stopped: the guardian (pid {guardian}) still runs with its backend; once "
            "it is gone, run `tenure down` again"), down.out
        assert running(owner, ticks) and running(app, app_ticks)
        assert cluster.apps()["s/a/0"]["restarts"] == 0
    finally:
        os.kill(guardian, signal.SIGCONT)   # the pending SIGTERM: it retires its backend
    cluster.wait(lambda: len(cluster.daemon_pids()) == 1, 30, "the guardian's exit")
    again = cluster.down()
    assert again.code == 0 and again.out["owner"] is True, again
    assert not running(app, app_ticks)


def test_status_says_when_the_guardian_is_not_running(cluster):
    """Was silent: the apps looked fine while a backend crash would go unrecovered."""
    cluster.up("[stacks.s.apps.a]\ncommand = [\"sleep\", \"1000\"]\n")
    assert cluster.cli("status", check=True).out["guardian_running"] is True
    guardian = cluster.daemon_pids()[1]
    os.kill(guardian, signal.SIGKILL)
    cluster.wait(lambda: cluster.cli("status").out["guardian_running"] is False, 10,
                 "the guardian's socket refusing")
    text = cluster.cli_text("status")
    assert "guardian: NOT RUNNING: a backend crash would not be recovered" in text, text
    cluster.up()   # a new guardian adopts the running backend
    assert cluster.cli("status", check=True).out["guardian_running"] is True
    assert "NOT RUNNING" not in cluster.cli_text("status")


def test_an_error_the_backend_answers_is_not_taken_for_a_missing_backend(cluster):
    """With the owner stopped, `tenure logs` said 'BACKEND_UNAVAILABLE: no backend
    generation answers' although the backend had answered: it could not reach the
    owner. With the owner gone, the journal is now read from its file (an app that
    wrote nothing has no lines there); a stopped owner is tests/integration/guardian/
    test_owner_silent.py's."""
    from protocol.procfs import running, start_ticks
    cluster.up("[stacks.s.apps.a]\ncommand = [\"sleep\", \"1000\"]\n")
    owner = cluster.daemon_pids()[0]
    ticks = start_ticks(owner)
    os.kill(owner, signal.SIGTERM)
    cluster.wait(lambda: not running(owner, ticks), 30, "the owner's shutdown")
    res = cluster.cli("logs", "s/a")
    assert res.code == 1 and res.out["error"]["code"] == "NOT_FOUND", res
    assert res.out["error"]["msg"] == "the journal has no lines of 's/a'", res
    assert res.stderr.startswith("tenure: logs: the owner is not running: reading "), res
    assert cluster.backend_pid()   # the backend answered: it runs
