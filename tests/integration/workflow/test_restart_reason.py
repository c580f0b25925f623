"""Why a new backend starts instances again, in its log: after `tenure down` and `up` the
owner they ran under stopped them itself, which is information, not the warning about
processes lost while no backend watched (tests/unit/backend/test_owner_replaced.py has
the decision)."""

from __future__ import annotations

CONFIG = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n'


def test_after_down_and_up_the_restart_is_explained_not_warned(cluster):
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    cluster.wait(lambda: cluster.call("generation.certify")["published"], 30, "certified")
    cluster.down()
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    text = cluster.backend_log()
    assert "ran under the owner that stopped before this one" in text, text
    assert "lost their process" not in text, text
