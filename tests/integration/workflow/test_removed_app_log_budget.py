"""An app taken out of the config keeps the log budget it had while its lines are kept
(until `[retention] removed_app_logs_days`), through the real path: tenure.toml, the
backend, the owner's journal. Was: the backend's next call named only the config's
apps, the owner gave the removed one the default (64 MiB) at once, and a larger budget's
lines were pruned to it days early. One that comes back without a budget of its own
has the default again. Real daemons, the real command line."""

from __future__ import annotations

import sqlite3
import sys
from typing import Any

MIB = 1 << 20
WRITER = (f'command = ["{sys.executable}", "-c", "import sys, time\\nfor i in range(128): '
          "sys.stdout.write('x' * 16383 + chr(10))\\nprint('done', flush=True)\\n"
          'time.sleep(100000)"]\n')
MARK = '[stacks.s.apps.mark]\ncommand = ["sleep", "100000"]\nlog_retention = "{}"\n'


def _budgets(cluster: Any) -> dict[str, int]:
    """The budgets the owner's journal holds (``meta`` rows ``retention/STACK/APP``)."""
    path = cluster.layout.execution / "journal.db"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {key.removeprefix("retention/"): n for key, n in conn.execute(
            "SELECT key, value FROM meta WHERE key LIKE 'retention/%'")}
    finally:
        conn.close()


def _lines(cluster: Any, app: str) -> list[bytes]:
    with cluster.owner() as c:
        page = c.call("logs.read", {"stack": "s", "app": app, "limit": 10_000})
    return [r["data"] for r in page["records"]]


def test_a_removed_app_keeps_its_log_budget(cluster: Any) -> None:
    cluster.up(f'[stacks.s.apps.w]\n{WRITER}log_retention = "1MiB"\n' + MARK.format("4MiB"))
    cluster.wait_ready(2)
    cluster.wait(lambda: b"done" in _lines(cluster, "w"), 30, "2 MiB written")
    assert _budgets(cluster) == {"s/w": MIB, "s/mark": 4 * MIB}
    # w taken out; mark's budget lowered, which the backend tells a second after the
    # apply, in the same call that would name w no more
    cluster.up(MARK.format("2MiB"))
    cluster.wait(lambda: _budgets(cluster).get("s/mark") == 2 * MIB, 30, "mark lowered")
    assert _budgets(cluster) == {"s/w": MIB, "s/mark": 2 * MIB}
    kept = _lines(cluster, "w")
    assert b"done" in kept and len(kept) < 128   # within the budget it had
    # back without a budget of its own: the default again
    cluster.up('[stacks.s.apps.w]\ncommand = ["sleep", "100000"]\n' + MARK.format("2MiB"))
    cluster.wait(lambda: "s/w" not in _budgets(cluster), 30, "w at the default")
    assert _budgets(cluster) == {"s/mark": 2 * MIB}
