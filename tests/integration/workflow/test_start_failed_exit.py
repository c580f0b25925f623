"""A start or restart whose instance gives up (failed) exits 1, naming it and where to
look: it printed 'failed' and exited 0, so `tenure start x && next` went on."""

from __future__ import annotations

CONFIG = """
[stacks.s.apps.ok]
command = ["sleep", "100000"]

[stacks.s.apps.bad]
command = ["/nonexistent/program"]
start_limit = { burst = 1, interval = 60 }
"""


def test_a_start_that_ends_failed_exits_1(cluster):
    release = ["--release", str(cluster.release)] if cluster.release is not None else []
    up = cluster.cli("up", "--timeout", "60", "--config", str(cluster.write_config(CONFIG)),
                     *release)
    assert up.code == 1, up                # its apply failed: bad cannot start
    cluster.wait(lambda: cluster.apps().get("s/bad/0", {}).get("state") == "failed", 60,
                 "bad failed")
    res = cluster.cli("start", "s/bad", "--timeout", "30")
    assert res.code == 1 and res.out["instances"] == {"s/bad/0": "failed"}, res
    fine = cluster.cli("start", "s/ok", "--timeout", "30")
    assert fine.code == 0, fine
    text = cluster.cli_text("start", "s/bad", "--timeout", "30", expect=1)
    assert "failed: s/bad/0 (`tenure inspect s/bad/0` says why" in text, text
