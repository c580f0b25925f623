"""Exits no backend saw are recorded by the next generation: the apps `tenure down`
stopped (through the owner) and an app killed while no backend ran (found by the
reviewed recovery) each get an `exit` event, at the time the owner recorded, and their
count in `tenure_app_exits_total`."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "guardian"))
from test_handoff_support import stop_cluster_guardian, wait_gone

CONFIG = """
[stacks.s.apps.calm]
command = ["sleep", "infinity"]

[stacks.s.apps.victim]
command = ["sleep", "infinity"]
"""


def _exits(cluster: Any) -> dict[str, list[dict[str, Any]]]:
    out = cluster.cli("events", "--kind", "exit", "-n", "100", check=True).out
    lines = [] if out is None else out.splitlines() if isinstance(out, str) else \
        [json.dumps(out)]
    by: dict[str, list[dict[str, Any]]] = {}
    for e in (json.loads(ln) for ln in lines if ln.strip()):
        by.setdefault(e["target"], []).append(e)
    return by


def _exit_counts(cluster: Any, key: str) -> dict[str, int]:
    m = cluster.cli("metrics", check=True).out
    return next(a["exits"] for a in m["apps"] if a["key"] == key)


def test_the_next_generation_records_what_down_stopped(cluster: Any) -> None:
    cluster.up(CONFIG)
    before = cluster.wait_ready(2)
    cluster.down()
    stopped_at = time.time()
    cluster.up()
    cluster.wait_ready(2)
    exits = _exits(cluster)
    for key in ("s/calm/0", "s/victim/0"):
        (e,) = exits[key]
        assert e["data"] == {"pid": before[key]["pid"], "exit_code": None,
                             "signal": signal.SIGTERM, "core_dumped": False,
                             "requested": True}, e
        assert e["at"] <= stopped_at, (e, stopped_at)   # when it ended, not when heard
        assert _exit_counts(cluster, key)["requested"] == 1
    # the new generation says it took over before it tells what it found and did
    out = cluster.cli("events", "-n", "100", check=True).out
    mine = [json.loads(ln) for ln in out.splitlines() if ln.strip()]
    last = mine[-1]["activation"]
    theirs = [(e["kind"], e["data"].get("phase")) for e in mine if e["activation"] == last]
    assert theirs[0] == ("handoff", "adopted") and len(theirs) > 1, theirs


def test_an_app_killed_while_no_backend_ran_is_an_unrequested_exit(cluster: Any) -> None:
    cluster.up(CONFIG)
    before = cluster.wait_ready(2)
    cluster.wait(lambda: cluster.call("generation.certify")["published"], 30,
                 "a published recovery certificate")   # the next up recovers from it
    stop_cluster_guardian(cluster, signal.SIGKILL)   # first, or it starts a backend again
    wait_gone(cluster.kill_backend())
    os.kill(before["s/victim/0"]["pid"], signal.SIGKILL)
    blocked = cluster.cli("up")      # the app changed while no backend ran: reviewed
    assert blocked.out["error"]["code"] == "RECOVERY_BLOCKED", blocked
    plan = cluster.cli("backend", "recover", "--dry-run", check=True).out
    cluster.cli("backend", "recover", "--digest", plan["digest"], check=True)
    cluster.wait_ready(2)
    exits = _exits(cluster)
    assert "s/calm/0" not in exits                      # adopted: it never ended
    (e,) = exits["s/victim/0"]
    assert (e["data"]["signal"], e["data"]["requested"]) == (signal.SIGKILL, False), e
    counts = _exit_counts(cluster, "s/victim/0")
    assert (counts.get("signal"), counts.get("requested", 0)) == (1, 0), counts


def _saved_generation(cluster: Any, key: str) -> int | None:
    """The generation backend.db last saved for instance ``key`` (read only); None when
    it cannot be read now (a write under way)."""
    import sqlite3

    from protocol.durable import read_rows
    try:
        rows = read_rows(str(cluster.layout.backend_db),
                         f"SELECT wire FROM instances WHERE key = '{key}'")
    except sqlite3.Error:
        return None
    return int(json.loads(rows[0][0])["generation"]) if rows else None


def _live_generation(cluster: Any, key: str) -> int:
    (lk,) = [k for k in cluster.pids() if k.startswith(key + "/")]
    return int(lk.rsplit("/", 1)[1])


def test_a_restart_the_backend_did_not_live_to_save_still_counts_its_exit(
        cluster: Any) -> None:
    """`tenure restart`, then the backend killed before its next save (every 0.5 s):
    the recovery adopts the new launch, and the replaced process's exit, which the
    owner has on record, is counted and told at the time it ended. Was: restarts were
    right but `tenure_app_exits_total` stayed one short and no `exit` event named the
    replaced pid."""
    cluster.up(CONFIG)
    cluster.wait_ready(2)
    replaced: list[int] = []
    for _ in range(10):   # until the kill lands before the save of the restart
        backend = cluster.backend_pid()
        replaced.append(cluster.apps()["s/victim/0"]["pid"])
        restarted_at = time.time()
        cluster.cli("restart", "s/victim", check=True)
        os.kill(backend, signal.SIGSTOP)     # no save from here on
        if (_saved_generation(cluster, "s/victim/0") or 1 << 30) < \
                _live_generation(cluster, "s/victim/0"):
            os.kill(backend, signal.SIGKILL)    # ends a stopped process too
            break
        os.kill(backend, signal.SIGCONT)
        cluster.wait_ready(2)
    else:
        raise AssertionError("every restart was saved before the backend could be killed")
    wait_gone(backend)

    def recovered() -> bool:
        st = cluster.cli("backend", "status").out or {}
        if st.get("blocked") is not None:
            plan = cluster.cli("backend", "recover", "--dry-run", check=True).out
            cluster.cli("backend", "recover", "--digest", plan["digest"], check=True)
        return cluster.backend_pid() != backend
    cluster.wait(recovered, 90, "a recovered backend")
    cluster.wait_ready(2)
    restarts = len(replaced)
    assert cluster.apps()["s/victim/0"]["restarts"] == restarts
    counts = _exit_counts(cluster, "s/victim/0")
    assert {r: n for r, n in counts.items() if n} == {"requested": restarts}, counts
    told = {e["data"]["pid"]: e for e in _exits(cluster)["s/victim/0"]}
    assert sorted(told) == sorted(replaced), (told, replaced)
    last = told[replaced[-1]]
    assert last["data"]["requested"] is True
    assert restarted_at <= last["at"] <= time.time(), last
