"""``op.show`` with ``wait``: the backend answers when the operation ends (what `tenure
up` and `apply` wait with, instead of asking every 20 ms), at once for one that ended
already, and refuses a wait beyond its limit."""

from __future__ import annotations

import time

import pytest

from protocol.errors import BadRequest

CONFIG = '[stacks.s.apps.a]\ncommand = ["sleep", "100000"]\n'
SLOW = CONFIG + ('[stacks.s.apps.b]\ncommand = ["sleep", "100000"]\n'
                 'ready = { kind = "delay", delay = 1.5 }\n')


def test_op_show_answers_when_the_operation_ends(cluster):
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    with cluster.api() as c:
        plan = c.call("plan", {"config_text": SLOW, "source": "t.toml"})
        op = c.call("apply", {"plan": plan["id"]})
        assert c.call("op.show", {"id": op["id"]})["outcome"] is None   # no wait: now
        t0 = time.monotonic()
        row = c.call("op.show", {"id": op["id"], "wait": 20})
        took = time.monotonic() - t0
        assert row["outcome"] == "success", row
        assert 0.5 < took < 10, took       # with the operation's end, not the wait's
        t0 = time.monotonic()
        assert c.call("op.show", {"id": op["id"], "wait": 20})["outcome"] == "success"
        assert time.monotonic() - t0 < 1.0  # ended already: at once
        with pytest.raises(BadRequest, match="wait"):
            c.call("op.show", {"id": op["id"], "wait": 31})


def test_op_show_wait_on_the_command_line(cluster):
    """`tenure op show ID --wait`, which `tenure up` names for an operation it leaves
    running: exit 4 while it runs at --timeout, then 0 with the row once it ended."""
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    with cluster.api() as c:
        plan = c.call("plan", {"config_text": SLOW, "source": "t.toml"})
        op = c.call("apply", {"plan": plan["id"]})
    running = cluster.cli("op", "show", op["id"], "--wait", "--timeout", "0.2")
    assert running.code == 4 and running.out["outcome"] is None, running
    ended = cluster.cli("op", "show", op["id"], "--wait", "--timeout", "30")
    assert ended.code == 0 and ended.out["outcome"] == "success", ended


def test_apply_wait_takes_a_timeout(cluster):
    """Was: `apply --wait` waited up to an hour, whatever the caller's budget."""
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    plan = cluster.cli("plan", "--config", str(cluster.write_config(SLOW, "slow.toml")),
                       check=True).out
    t0 = time.monotonic()
    running = cluster.cli("apply", plan["id"], "--wait", "--timeout", "0.2")
    assert running.code == 4 and running.out["outcome"] is None, running
    assert time.monotonic() - t0 < 5
    ended = cluster.cli("op", "show", running.out["id"], "--wait", "--timeout", "30")
    assert ended.code == 0 and ended.out["outcome"] == "success", ended
    bad = cluster.cli("apply", plan["id"], "--wait", "--timeout", "0")
    assert bad.code != 0 and bad.out["error"]["code"] == "BAD_REQUEST", bad
