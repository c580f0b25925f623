"""An app's ``log_retention`` through the real path: tenure.toml, the backend, the
owner's journal. The app keeps that much of its output (the default is 64 MiB); the
budget follows the config when it changes, without restarting the app."""

from __future__ import annotations

import json
import sys

MIB = 1 << 20
WRITER = (f'command = ["{sys.executable}", "-c", "import sys, time\\nfor i in range(192): '
          "sys.stdout.write('x' * 16383 + chr(10))\\nprint('done', flush=True)\\n"
          'time.sleep(100000)"]\n')


def _kept(cluster) -> tuple[int, bool]:
    """Bytes of s/w's output the journal holds, and whether its last line is there."""
    res = cluster.cli("logs", "s/w", "-n", "100000")   # one JSON record a line
    assert res.code == 0, res
    out = res.out if isinstance(res.out, str) else json.dumps(res.out) if res.out else ""
    records = [json.loads(line) for line in out.splitlines()]
    return sum(len(r["data"]) for r in records), any(r["data"] == "done" for r in records)


def test_an_app_keeps_its_log_retention_and_follows_the_config(cluster) -> None:
    cluster.up(f'[stacks.s.apps.w]\n{WRITER}log_retention = "1MiB"\n')
    cluster.wait_ready(1)
    pid = cluster.pids()
    cluster.wait(lambda: _kept(cluster)[1] and _kept(cluster)[0] <= MIB, 30,
                 "3 MiB written and 1 MiB kept")
    assert _kept(cluster)[0] >= MIB // 2
    text = cluster.cli_text("status")
    assert "predates log_retention" not in text, text
    assert "log retention:     1.0 MiB" in cluster.cli_text("inspect", "s/w")
    # a larger budget keeps what is there; nothing restarts for it
    cluster.up(f'[stacks.s.apps.w]\n{WRITER}log_retention = "2MiB"\n')
    assert cluster.pids() == pid
