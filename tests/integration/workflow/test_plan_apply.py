"""plan/apply with real processes: a plan lists exactly the differences; apply performs
them; an old plan after another apply is STALE_PLAN; a second apply while one runs is
OPERATION_IN_PROGRESS; a rolling restart of 3 instances keeps at least 2 ready; a backend
handoff in the middle of an apply resumes it to completion."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

from protocol.errors import OperationInProgress, StalePlan


def observations(cluster: Any) -> list[dict[str, Any]]:
    with cluster.owner() as c:
        return list(c.call("observations.read", {"after": 0, "limit": 10000})["events"])


def app(stack: str, name: str, command: str = "sleep 1000", extra: str = "") -> str:
    argv = ", ".join(f'"{w}"' for w in command.split())
    return f"\n[stacks.{stack}.apps.{name}]\ncommand = [{argv}]\n{extra}\n"


def plan_file(cluster: Any, text: str, name: str) -> dict[str, Any]:
    path = cluster.write_config(text, name)
    res = cluster.cli("plan", "--config", str(path), check=True)
    return dict(res.out)


def wait_op(cluster: Any, op_id: str, timeout: float = 60) -> dict[str, Any]:
    cluster.wait(lambda: cluster.call("op.show", {"id": op_id})["outcome"] is not None,
                 timeout, f"operation {op_id} ended")
    return dict(cluster.call("op.show", {"id": op_id}))


V1 = (app("p", "keep") + app("p", "chg") + app("p", "gone") + app("p", "scl")
      + app("q", "other"))
V2 = (app("p", "keep") + app("p", "chg", "sleep 1001") + app("p", "new")
      + app("p", "scl", extra="instances = 2") + app("q", "other"))


def test_plan_lists_exactly_the_differences_apply_and_stale_plan(cluster):
    cluster.up(V1)
    before = cluster.wait_ready(5)
    rev1 = cluster.status()["backend"]["config_revision"]

    plan = plan_file(cluster, V2, "v2.toml")
    got = sorted((c["action"], c["app"]) for c in plan["changes"])
    assert got == [("restart", "p/chg"), ("scale", "p/scl"), ("start", "p/new"),
                   ("stop", "p/gone")], plan["changes"]
    by = {c["app"]: c for c in plan["changes"]}
    assert (by["p/scl"]["from"], by["p/scl"]["to"]) == (1, 2)
    assert plan["stacks"] == ["p"]
    assert plan["id"] and plan["fingerprint"]
    # a plan changes nothing by itself
    assert cluster.status()["backend"]["config_revision"] == rev1
    assert {k: r["pid"] for k, r in cluster.apps().items()} == \
        {k: r["pid"] for k, r in before.items()}

    res = cluster.cli("apply", plan["id"], "--wait", check=True)
    assert res.out["outcome"] == "success", res.out
    after = cluster.wait_ready(6)
    assert set(after) == {"p/keep/0", "p/chg/0", "p/new/0", "p/scl/0", "p/scl/1",
                          "q/other/0"}
    assert after["p/keep/0"]["pid"] == before["p/keep/0"]["pid"]
    assert after["q/other/0"]["pid"] == before["q/other/0"]["pid"]
    assert after["p/scl/0"]["pid"] == before["p/scl/0"]["pid"]
    assert after["p/chg/0"]["pid"] != before["p/chg/0"]["pid"]
    assert [k for k in cluster.pids() if k.startswith("p/gone/")] == []
    assert cluster.status()["backend"]["config_revision"] != rev1
    # nothing left to do
    assert plan_file(cluster, V2, "v2.toml")["changes"] == []

    # two plans made against the same state; the second one is applied first
    v3 = V2.replace('"sleep", "1001"', '"sleep", "1002"')
    v4 = V2 + app("p", "newer")
    old = plan_file(cluster, v3, "v3.toml")
    fresh = plan_file(cluster, v4, "v4.toml")
    assert cluster.cli("apply", fresh["id"], "--wait", check=True).out["outcome"] == \
        "success"
    pids = cluster.pids()
    rev = cluster.status()["backend"]["config_revision"]
    with pytest.raises(StalePlan):
        cluster.call("apply", {"plan": old["id"]})
    res = cluster.cli("apply", old["id"])
    assert res.code == 1 and res.out["error"]["code"] == "STALE_PLAN", res
    assert cluster.pids() == pids
    assert cluster.status()["backend"]["config_revision"] == rev


def test_a_definition_change_with_a_scale_restarts_only_the_instances_it_had(cluster):
    """Was: the restart covered the new instance count, so the instance the scale had
    just started on the new definition was stopped and started again (its counters:
    one restart, one requested exit)."""
    cluster.up(app("s", "v", extra='env = { X = "3" }'))
    before = cluster.wait_ready(1)["s/v/0"]["pid"]
    changed = app("s", "v", extra='env = { X = "4" }\ninstances = 3')
    plan = plan_file(cluster, changed, "v2.toml")
    assert [(c["action"], c.get("instances")) for c in plan["changes"]] == \
        [("restart", 1), ("scale", None)], plan["changes"]
    res = cluster.cli("apply", plan["id"], "--wait", check=True).out
    assert res["outcome"] == "success", res
    apps = cluster.wait_ready(3)
    assert apps["s/v/0"]["pid"] != before and apps["s/v/0"]["restarts"] == 1
    assert apps["s/v/1"]["restarts"] == 0 and apps["s/v/2"]["restarts"] == 0, apps
    smaller = plan_file(cluster, app("s", "v", extra='env = { X = "5" }\ninstances = 1'),
                        "v3.toml")
    assert [(c["action"], c.get("instances")) for c in smaller["changes"]] == \
        [("restart", 1), ("scale", None)], smaller["changes"]


def test_a_scale_starts_only_the_instances_it_adds(cluster):
    """Was: scaling 3 -> 4 started every instance below 4, so the one the operator had
    stopped came back (and a plan that said only `scale` did more than it said)."""
    cluster.up(app("s", "v", extra="instances = 3"))
    cluster.wait_ready(3)
    cluster.cli("stop", "s/v/1", check=True)
    for count, name in ((4, "v4.toml"), (2, "v2.toml")):
        plan = plan_file(cluster, app("s", "v", extra=f"instances = {count}"), name)
        assert [c["action"] for c in plan["changes"]] == ["scale"], plan["changes"]
        res = cluster.cli("apply", plan["id"], "--wait", check=True).out
        assert res["outcome"] == "success", res
        apps = cluster.apps()
        assert sorted(apps) == [f"s/v/{i}" for i in range(count)]
        assert apps["s/v/1"]["state"] == "stopped", apps["s/v/1"]
        assert all(a["state"] == "ready" for k, a in apps.items() if k != "s/v/1"), apps


def test_second_apply_on_a_busy_stack_is_operation_in_progress(cluster):
    cluster.up(app("c", "a"))
    cluster.wait_ready(1)
    slow = app("c", "a") + app("c", "slow", extra='ready = { kind = "delay", delay = 4 }')
    first = cluster.call("apply", {"plan": plan_file(cluster, slow, "slow.toml")["id"]})
    assert first["outcome"] is None and first["stage"] == "running", first
    second = plan_file(cluster, slow + app("c", "b") + app("d", "x"), "more.toml")
    with pytest.raises(OperationInProgress) as exc:
        cluster.call("apply", {"plan": second["id"]})
    assert exc.value.data.get("operation") == first["id"]
    # the stacks it owns, not the ones asked for (was: "owns c, d")
    assert exc.value.msg == f"operation {first['id']} owns c", exc.value
    assert exc.value.data["stacks"] == ["c"]
    res = cluster.cli("apply", second["id"])
    assert res.code == 1 and res.out["error"]["code"] == "OPERATION_IN_PROGRESS", res
    assert [k for k in cluster.pids() if k.startswith(("c/b/", "d/"))] == []
    assert wait_op(cluster, first["id"])["outcome"] == "success"
    assert cluster.apps()["c/slow/0"]["ready"]


ROLL = app("r", "web", extra='instances = 3\nenv = { V = "1" }\n'
           'ready = { kind = "delay", delay = 0.4 }')


class ReadyMonitor:
    """Polls status every ~20 ms in a thread; records the fewest ready instances."""

    def __init__(self, cluster: Any, prefix: str) -> None:
        self.cluster, self.prefix = cluster, prefix
        self.minimum = 99
        self.samples = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                apps = self.cluster.apps()
            except Exception:
                self.errors += 1  # e.g. between backend generations
            else:
                n = sum(r["ready"] for k, r in apps.items() if k.startswith(self.prefix))
                self.minimum = min(self.minimum, n)
                self.samples += 1
            time.sleep(0.02)

    def __enter__(self) -> ReadyMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def test_rolling_restart_of_three_instances_keeps_two_ready(cluster):
    cluster.up(ROLL)
    before = cluster.wait_ready(3)
    plan = plan_file(cluster, ROLL.replace('V = "1"', 'V = "2"'), "roll.toml")
    assert [(c["action"], c["app"]) for c in plan["changes"]] == [("restart", "r/web")]
    with ReadyMonitor(cluster, "r/web/") as mon:
        op = cluster.call("apply", {"plan": plan["id"]})
        assert wait_op(cluster, op["id"])["outcome"] == "success"
        time.sleep(0.1)
    assert mon.samples > 20
    assert mon.minimum == 2, f"only {mon.minimum} of 3 ready during the rolling restart"
    after = cluster.apps()
    for i in range(3):
        assert after[f"r/web/{i}"]["ready"]
        assert after[f"r/web/{i}"]["pid"] != before[f"r/web/{i}"]["pid"]
        assert after[f"r/web/{i}"]["generation"] == 2
    # one instance at a time: each relaunch waits for the previous one's readiness
    relaunch = sorted((e["at"], e["instance"]) for e in observations(cluster)
                      if e["kind"] == "launched" and e["app"] == "web"
                      and e["generation"] == 2)
    assert [i for _, i in relaunch] == [0, 1, 2]
    assert all(b - a >= 0.4 for (a, _), (b, _) in itertools.pairwise(relaunch))


SLOW3 = app("h", "slow", extra='instances = 3\nenv = { V = "1" }\n'
            'ready = { kind = "delay", delay = 1.5 }')


def test_backend_handoff_during_an_apply_resumes_it_to_completion(cluster):
    cluster.up(SLOW3)
    before = cluster.wait_ready(3, timeout=30)
    activation = cluster.status()["backend"]["activation"]
    release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    plan = plan_file(cluster, SLOW3.replace('V = "1"', 'V = "2"'), "slow3.toml")
    op = cluster.call("apply", {"plan": plan["id"]})

    def restarting() -> bool:
        return any(e["kind"] == "launched" and e["app"] == "slow" and e["generation"] == 2
                   for e in observations(cluster))
    cluster.wait(restarting, 10, "the rolling restart began")
    up = cluster.cli("backend", "upgrade", release, timeout=300)
    assert up.ok and up.out["activation"]["phase"] == "complete", up
    assert cluster.status()["backend"]["activation"] != activation
    done = wait_op(cluster, op["id"], timeout=60)
    assert done["outcome"] == "success", done
    after = cluster.wait_ready(3, timeout=30)
    for i in range(3):
        row = after[f"h/slow/{i}"]
        assert row["pid"] != before[f"h/slow/{i}"]["pid"]
        # restarted exactly once, even though the step was interrupted
        assert row["generation"] == 2 and row["restarts"] == 1, row
    launched = [e for e in observations(cluster) if e["kind"] == "launched"
                and e["app"] == "slow"]
    assert len(launched) == 6
    # the handoff really was in the middle: relaunches before and after the new fence
    fence = max(e["cursor"] for e in observations(cluster) if e["kind"] == "fenced")
    relaunched = [e["cursor"] for e in launched if e["generation"] == 2]
    assert min(relaunched) < fence < max(relaunched), (relaunched, fence)
    # the new config is what runs
    assert cluster.status()["backend"]["config_revision"] == plan["config_revision"]
