"""The drain barrier with real processes (issue 10): an app that takes seconds to stop
makes a restart step slow; a drain that begins mid-step lets the step finish (the app is
never left stopped), a checkpoint is refused until then, and an admitted request ends
with an answer — success or SHUTTING_DOWN naming what was done — never an unknown
outcome. Driven through the generation control methods exactly as the guardian calls
them (drain, checkpoint, resume) and through a real upgrade."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import pytest

from backend.testing import in_thread
from protocol.errors import OperationInProgress

STOP_SECONDS = 2.0


def slow_app(stack: str, name: str, instances: int = 1, stop_seconds: float = STOP_SECONDS,
             env: str = "1", gate: Any = None, armed: Any = None) -> str:
    """An app that needs ``stop_seconds`` to stop after SIGTERM; with ``gate`` (a path)
    until that file exists instead (at most 30 s), so that a test decides when. With
    ``armed`` (a directory) each process creates a file there named by its pid once its
    handler is in place: a SIGTERM before that would end it at once (:func:`wait_armed`)."""
    wait = f"time.sleep({stop_seconds})" if gate is None else \
        (f"[time.sleep(0.02) for _ in range(1500) "
         f'if not __import__("os").path.exists("{gate}")]')
    arm = "" if armed is None else \
        f'open("{armed}/%d" % __import__("os").getpid(), "w").close(); '
    code = (f"import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: "
            f"({wait}, sys.exit(0))); {arm}time.sleep(1e9)")
    return (f'\n[stacks.{stack}.apps.{name}]\ncommand = ["{sys.executable}", "-c", '
            f"'{code}']\ninstances = {instances}\nenv = {{ V = \"{env}\" }}\n"
            "stop = { timeout = 30 }\n")


def _armed(cluster: Any) -> Any:
    armed = cluster.home / "armed"
    armed.mkdir()
    return armed


def wait_armed(cluster: Any, armed: Any, apps: dict[str, dict[str, Any]]) -> None:
    """Until every process of ``apps`` (wait_ready's answer) has its SIGTERM handler."""
    pids = {str(a["pid"]) for a in apps.values()}
    cluster.wait(lambda: pids <= set(os.listdir(armed)), 30, "handlers in place")


def control(cluster: Any, method: str, params: dict[str, Any] | None = None) -> Any:
    with cluster.api(timeout=120) as c:
        return c.call(method, params or {})


def state(cluster: Any, key: str) -> str:
    return str(cluster.apps()[key]["state"])


def test_drain_waits_for_an_in_flight_restart_and_refuses_a_checkpoint_meanwhile(cluster):
    gate = cluster.home / "stop-now"   # the app stops once the refusal was seen
    armed = _armed(cluster)
    cluster.up(slow_app("d", "slow", gate=gate, armed=armed))
    apps = cluster.wait_ready(1)
    wait_armed(cluster, armed, apps)
    before = apps["d/slow/0"]
    restart, answer = in_thread(lambda: cluster.call("restart", {"target": "d/slow",
                                                                 "timeout": 60.0}))
    cluster.wait(lambda: state(cluster, "d/slow/0") == "stopping", 10, "restart stopping")
    drain, drained = in_thread(lambda: control(cluster, "generation.drain", {"timeout": 30}))
    cluster.wait(lambda: control(cluster, "generation.status")["draining"], 10, "draining")

    with pytest.raises(OperationInProgress) as refused:   # the step is still mid-way
        control(cluster, "generation.checkpoint", {"path": str(cluster.home / "early.json")})
    assert refused.value.data["steps"] == ["restart d/slow/0"]
    assert not (cluster.home / "early.json").exists()
    gate.touch()

    drain.join(60)
    restart.join(60)
    d = drained["ok"]
    # it waited for the step that was in flight (not for a time: on a loaded machine
    # most of the app's stop may be over before the drain begins)
    assert (d["drained"], d["steps"], d["waited_for"]) == (True, [], ["restart d/slow/0"]), d
    [row] = control(cluster, "generation.status")["inventory"]
    assert row["launch_key"] == "d/slow/0/2" and row["pid"] != before["pid"]
    assert row["state"] == "ready"
    cp = control(cluster, "generation.checkpoint", {"path": str(cluster.home / "cp.json")})
    assert cp["launches"] == 1
    # every instance was started again before the drain froze the roll: no error (it
    # was SHUTTING_DOWN 'not restarted none ... run the command again', inviting a
    # second restart), the answer says the backend handed over before it was ready
    assert answer.get("ok", {}).get("handed_over") is True, answer

    assert control(cluster, "generation.resume") == {"resumed": True}
    apps = cluster.wait_ready(1)
    assert apps["d/slow/0"]["pid"] == row["pid"]
    assert cluster.pids() == {"d/slow/0/2": (row["pid"], row["start_ticks"])}


def test_an_operation_drained_mid_step_continues_after_resume(cluster):
    armed = _armed(cluster)
    cluster.up(slow_app("o", "web", instances=2, armed=armed))
    before = cluster.wait_ready(2)
    wait_armed(cluster, armed, before)
    path = cluster.write_config(slow_app("o", "web", instances=2, env="2"), "v2.toml")
    plan = cluster.cli("plan", "--config", str(path), check=True).out
    op = cluster.call("apply", {"plan": plan["id"]})
    cluster.wait(lambda: state(cluster, "o/web/0") == "stopping", 10, "step 0 stopping")

    d = control(cluster, "generation.drain", {"timeout": 30})
    inv = {r["launch_key"]: r for r in control(cluster, "generation.status")["inventory"]}
    assert sorted(inv) == ["o/web/0/2", "o/web/1/1"]        # step 0 done, step 1 not begun
    assert inv["o/web/1/1"]["pid"] == before["o/web/1"]["pid"]
    assert d["drained"] is True and d["waited_for"] == [f"operation {op['id']} step 0"], d
    cp = control(cluster, "generation.checkpoint", {"path": str(cluster.home / "cp.json")})
    assert cp["launches"] == 2
    control(cluster, "generation.resume")

    deadline = time.monotonic() + 60
    while (row := cluster.call("op.show", {"id": op["id"]}))["outcome"] is None:
        assert time.monotonic() < deadline, row
        time.sleep(0.05)
    assert (row["outcome"], row["step"], row["error"]) == ("success", 2, None), row
    after = cluster.wait_ready(2)
    assert [after[f"o/web/{i}"]["generation"] for i in (0, 1)] == [2, 2]
    assert after["o/web/0"]["pid"] == inv["o/web/0/2"]["pid"]


def test_a_restart_in_flight_during_an_upgrade_ends_with_every_app_running(cluster):
    armed = _armed(cluster)
    cluster.up(slow_app("u", "slow", instances=2, stop_seconds=3.0, armed=armed))
    before = cluster.wait_ready(2)
    wait_armed(cluster, armed, before)
    release = cluster.cli("backend", "status", check=True).out["selector"]["current"]
    restart, answer = in_thread(lambda: cluster.cli("restart", "u/slow", timeout=180))
    cluster.wait(lambda: state(cluster, "u/slow/0") == "stopping", 10, "restart stopping")

    up = cluster.cli("backend", "upgrade", release, timeout=300)
    restart.join(180)

    assert up.ok and up.out["activation"]["phase"] == "complete", up
    res = answer["ok"]
    if res.code != 0 and res.out.get("handed_over"):   # cut after the last one restarted
        assert res.code == 4, res
        restarted, remaining = ["u/slow/0", "u/slow/1"], []
    elif res.code != 0:   # cut at an instance boundary: a clear code, never an unknown outcome
        err = res.out["error"]
        assert err["code"] == "SHUTTING_DOWN", res
        restarted, remaining = err["data"]["restarted"], err["data"]["remaining"]
    else:
        restarted, remaining = ["u/slow/0", "u/slow/1"], []
    assert restarted and sorted(restarted + remaining) == ["u/slow/0", "u/slow/1"]
    after = cluster.wait_ready(2, timeout=60)
    for key in restarted:
        assert after[key]["pid"] != before[key]["pid"] and after[key]["generation"] == 2
    for key in remaining:
        assert after[key]["pid"] == before[key]["pid"] and after[key]["generation"] == 1
    assert {k: r["state"] for k, r in after.items()} == {"u/slow/0": "ready",
                                                         "u/slow/1": "ready"}
    [draining] = [r for r in up.out["receipts"] if r["phase"] == "draining"]
    assert draining["detail"]["waited_for"], draining   # a restart step was mid-way
