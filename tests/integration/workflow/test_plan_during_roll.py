"""A plan made while an apply rolls a restart out, through the real path. Was: it listed
the roll's own instances as `running an older definition` (so a change to another stack
was refused OPERATION_IN_PROGRESS), and it stayed applicable once the roll ended:
applying it then restarted an instance already on the new definition again."""

from __future__ import annotations

import time
from typing import Any

V1 = ('[stacks.s.apps.a]\ncommand = ["sleep", "300"]\ninstances = 2\n'
      'ready = { kind = "delay", delay = 1.5 }\nenv = { V = "1" }\n'
      '[stacks.t.apps.b]\ncommand = ["sleep", "300"]\nenv = { V = "1" }\n')
V2 = V1.replace('V = "1" }\n[stacks.t', 'V = "2" }\n[stacks.t')
V3 = V2.replace('V = "1" }\n', 'V = "3" }\n')


def _plan(cluster: Any, text: str, name: str) -> dict[str, Any]:
    path = cluster.write_config(text, name)
    return cluster.cli("plan", "--config", str(path), check=True).out


def _pids(cluster: Any) -> dict[str, int]:
    return {k: a["pid"] for k, a in cluster.apps().items()}


def test_a_plan_made_during_a_roll_is_its_own_and_stale_once_it_ended(cluster):
    assert V2 != V1 and V3 != V2
    cluster.up(V1)
    cluster.wait_ready(3)
    roll = cluster.cli("apply", _plan(cluster, V2, "v2.toml")["id"], check=True).out
    time.sleep(0.5)   # the roll is at s/a/0, waiting for it to be ready
    during = _plan(cluster, V3, "v3.toml")
    assert [(c["action"], c["app"]) for c in during["changes"]] == [("restart", "t/b")], \
        during["changes"]
    done = cluster.cli("op", "show", roll["id"], "--wait", check=True).out
    assert done["outcome"] == "success", done
    rolled = _pids(cluster)

    res = cluster.cli("apply", during["id"])   # what it was made from moved on
    assert res.code == 1 and res.out["error"]["code"] == "STALE_PLAN", res
    again = _plan(cluster, V3, "v3.toml")
    assert again["changes"] == during["changes"]
    assert again["fingerprint"] != during["fingerprint"]
    op = cluster.cli("apply", again["id"], "--wait", check=True).out
    assert op["outcome"] == "success", op
    after = _pids(cluster)
    assert {k: after[k] for k in ("s/a/0", "s/a/1")} == \
        {k: rolled[k] for k in ("s/a/0", "s/a/1")}, (rolled, after)
    assert after["t/b/0"] != rolled["t/b/0"]


def test_a_plan_made_during_a_roll_of_another_stack_is_admitted(cluster):
    cluster.up(V1)
    cluster.wait_ready(3)
    roll = cluster.cli("apply", _plan(cluster, V2, "v2.toml")["id"], check=True).out
    time.sleep(0.5)
    during = _plan(cluster, V3, "v3.toml")
    op = cluster.cli("apply", during["id"], "--wait", check=True).out
    assert op["outcome"] == "success" and op["stacks"] == ["t"], op
    done = cluster.cli("op", "show", roll["id"], "--wait", check=True).out
    assert done["outcome"] == "success", done
    again = _plan(cluster, V3, "v3.toml")
    assert again["changes"] == [], again
