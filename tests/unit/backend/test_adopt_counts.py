"""A recovery that adopts an instance the owner relaunched after the backend last saved
it (a `tenure restart` under way when the backend was killed): its RESTARTS counts that
launch and its UPTIME is its process's. It showed RESTARTS 1 for generation 3 (two
starts after the first) and an uptime from the recovery (6.9 s for an 11 s process)."""

from __future__ import annotations

import time

from backend.adopt import adopt_inventory
from backend.config import parse_config
from backend.instance import Instance, State
from backend.supervisor import Supervisor
from backend.testing import FakeOwner

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\nrestart = "always"\n'


def _saved(generation: int, restarts: int, state: State) -> dict[str, object]:
    app = parse_config(ONE, "t.toml").app("s", "a")
    assert app is not None
    inst = Instance(app, 0)
    inst.generation, inst.restarts = generation, restarts
    inst.state = state
    if state is not State.STOPPED:
        inst.pid, inst.start_ticks, inst.launched_at = 100, 5, 1.0
    return inst.to_wire()


def _adopt(saved: dict[str, object], generation: int, started_at: object) -> Instance:
    live = [{"launch_key": f"s/a/0/{generation}", "stack": "s", "app": "a", "instance": 0,
             "generation": generation, "pid": 4242, "start_ticks": 9, "state": "running",
             "started_at": started_at}]
    sup = Supervisor(FakeOwner(), 1)
    adopt_inventory(sup, parse_config(ONE, "t.toml"), {"s/a/0": saved}, live, 1000.0)
    return sup.instances["s/a/0"]


def test_a_relaunch_after_the_save_is_counted_and_its_uptime_is_the_process() -> None:
    inst = _adopt(_saved(2, 1, State.RESTARTING), 3, time.time() - 11.0)
    assert (inst.pid, inst.generation, inst.restarts) == (4242, 3, 2)
    assert inst.launched_at is not None and 988.5 < inst.launched_at < 989.5


def test_the_first_launch_is_no_restart_and_an_unknown_start_is_now() -> None:
    inst = _adopt(_saved(0, 0, State.STOPPED), 1, None)
    assert (inst.generation, inst.restarts, inst.launched_at) == (1, 0, 1000.0)
