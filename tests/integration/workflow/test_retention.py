"""`[retention]` through a real tenure: after many plans, launches and upgrades, each
store holds at most what the policy keeps (plus what is open), and nothing running is
touched."""

from __future__ import annotations

import sqlite3
from typing import Any

POLICY = """
[retention]
operations = 10
plans = 10
launches = 100
activations = 10
"""

CRASHER = """
[stacks.r.apps.crasher]
command = ["sh", "-c", "exit 1"]
restart = "always"
backoff = { initial = 0.01, max = 0.01 }
start_limit = { burst = 1000, interval = 60 }

[stacks.r.apps.steady]
command = ["sleep", "infinity"]
"""


def _count(path: Any, sql: str) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


def test_every_store_stays_within_its_retention(cluster):
    cluster.up(POLICY + CRASHER)
    cluster.wait(lambda: cluster.apps()["r/crasher/0"]["restarts"] >= 150, 60,
                 "150 restarts of the crasher")
    for i in range(12):                                   # 12 applied plans
        cluster.up(POLICY + CRASHER + f"\n[stacks.x{i}.apps.a]\ncommand = "
                   '["sleep", "infinity"]\n')
    release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    for _ in range(12):
        assert cluster.cli("backend", "upgrade", release, timeout=300).ok
    cluster.cli("stop", "r/crasher", check=True)           # no new rows while we count
    steady = cluster.apps()["r/steady/0"]["pid"]
    layout = cluster.layout
    owner_db = layout.execution / "owner.db"
    ended = "SELECT count(*) FROM launches WHERE state IN ('exited', 'failed', 'lost')"
    before = _count(owner_db, ended)
    pruned = cluster.cli("backend", "prune", check=True).out
    assert pruned["policy"] == {"operations": 10, "plans": 10, "launches": 100,
                                "activations": 10, "removed_app_logs_days": 7}
    after = _count(owner_db, ended)
    assert after <= 100 and pruned["deleted"]["launches"] == before - after, (before, pruned)
    assert _count(owner_db, "SELECT count(*) FROM launches WHERE state = 'running'") == 2
    assert _count(layout.backend_db, "SELECT count(*) FROM operations") <= 10
    assert _count(layout.backend_db, "SELECT count(*) FROM plans") <= 20
    state_db = layout.home / "runtime" / "state.db"
    assert _count(state_db, "SELECT count(*) FROM activations") <= 11
    assert _count(state_db, "SELECT count(*) FROM grants") <= 11
    assert cluster.apps()["r/steady/0"]["pid"] == steady     # nothing running touched
    assert cluster.cli("status").code == 0
