"""An apply leaves what the operator stopped stopped, and a plan converges on a stopped
stack, through the real path.

Was: a definition change restarted instances stopped by `tenure stop` (also one stopped
after the apply began, which the roll then started again: "the stop wins" is the rule
everywhere else), and the plan called it a plain restart; and an app added to a stopped
stack (or instances a scale added there) were planned as `start`/`scale` again on every
plan, since they were never launched, so `up --config` made a new operation each time."""

from __future__ import annotations

import time


def _apply(cluster, text: str, name: str) -> dict:
    path = cluster.write_config(text, name)
    plan = cluster.cli("plan", "--config", str(path), check=True).out
    op = cluster.cli("apply", plan["id"], "--wait", check=True).out
    return {"plan": plan, "op": op}


def _states(cluster) -> dict:
    return {k: (a["state"], a["pid"]) for k, a in cluster.apps().items()}


def test_a_definition_change_leaves_stopped_instances_stopped_with_it(cluster):
    v1 = '[stacks.s.apps.b]\ncommand = ["sleep", "300"]\ninstances = 3\nenv = { V = "1" }\n'
    cluster.up(v1)
    cluster.wait_ready(3)
    cluster.cli("stop", "s/b/1", check=True)
    before = _states(cluster)
    done = _apply(cluster, v1.replace('"1"', '"2"'), "v2.toml")
    change = done["plan"]["changes"][0]
    assert change["action"] == "restart" and change["stay_stopped"] == [1], change
    text = cluster.cli_text("plan", "--config", str(cluster.write_config(
        v1.replace('"1"', '"3"'), "v3.toml")))
    assert "instance 1 stopped: takes it, stays stopped" in text, text
    assert done["op"]["outcome"] == "success", done
    after = _states(cluster)
    assert after["s/b/1"] == ("stopped", None), after
    for k in ("s/b/0", "s/b/2"):
        assert after[k][0] == "ready" and after[k][1] != before[k][1], after
    cluster.cli("start", "s/b/1", check=True)   # it runs the new definition
    pid = cluster.apps()["s/b/1"]["pid"]
    with open(f"/proc/{pid}/environ", "rb") as f:
        assert b"V=2" in f.read().split(b"\0")


def test_a_stop_asked_while_the_roll_runs_is_not_undone_by_it(cluster):
    v1 = ('[stacks.s.apps.r]\ncommand = ["sleep", "300"]\ninstances = 3\n'
          'ready = { kind = "delay", delay = 1.5 }\nenv = { V = "1" }\n')
    cluster.up(v1)
    cluster.wait_ready(3)
    path = cluster.write_config(v1.replace('"1"', '"2"'), "v2.toml")
    plan = cluster.cli("plan", "--config", str(path), check=True).out
    op = cluster.cli("apply", plan["id"], check=True).out
    time.sleep(0.5)   # the roll is at s/r/0, waiting for it to be ready
    cluster.cli("stop", "s/r/2", check=True)
    done = cluster.cli("op", "show", op["id"], "--wait", check=True).out
    assert done["outcome"] == "success", done
    assert cluster.apps()["s/r/2"]["state"] == "stopped"


def test_plans_converge_for_apps_a_stopped_stack_records(cluster):
    v1 = '[stacks.t.apps.q]\ncommand = ["sleep", "300"]\n'
    cluster.up(v1)
    cluster.wait_ready(1)
    stop = cluster.cli("stack", "stop", "t", "--dry-run", check=True).out
    cluster.cli("stack", "stop", "t", "--digest", stop["digest"], check=True)
    v2 = v1.replace("\n", "\ninstances = 2\n", 1) + \
        '[stacks.t.apps.n]\ncommand = ["sleep", "300"]\n'
    assert _apply(cluster, v2, "v2.toml")["op"]["outcome"] == "success"
    again = cluster.cli("plan", "--config", str(cluster.home / "v2.toml"), check=True).out
    assert again["changes"] == [], again
    up = cluster.cli("up", "--config", str(cluster.home / "v2.toml"), check=True).out
    assert up["apply"]["operation"]["outcome"] == "no-change", up
    assert {k: a["state"] for k, a in cluster.apps().items()} == {
        "t/n/0": "stopped", "t/q/0": "stopped", "t/q/1": "stopped"}
    cluster.cli("stack", "start", "t", check=True)
    cluster.wait_ready(3)


def test_an_instance_that_ended_on_its_own_is_left_down_by_the_roll(cluster):
    """Was: only `tenure stop` counted; an instance shown `stopped` because it exited
    and its policy left it down (`exited`) was started by the restart step, and the plan
    did not say so."""
    v1 = ('[stacks.s.apps.e]\ncommand = ["sh", "-c", "[ \\"$TENURE_INSTANCE\\" = 1 ] || '
          'exec sleep 300"]\ninstances = 2\nrestart = "on-failure"\nenv = { V = "1" }\n')
    cluster.up(v1)
    cluster.wait(lambda: {k: a["state"] for k, a in cluster.apps().items()} ==
                 {"s/e/0": "ready", "s/e/1": "stopped"})
    done = _apply(cluster, v1.replace('"1"', '"2"'), "v2.toml")
    change = done["plan"]["changes"][0]
    assert change["action"] == "restart" and change["stay_stopped"] == [1], change
    assert done["op"]["outcome"] == "success", done
    assert cluster.apps()["s/e/1"]["state"] == "stopped"
    assert cluster.apps()["s/e/1"]["restarts"] == 0
