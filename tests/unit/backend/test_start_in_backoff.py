"""An explicit start of an instance in backoff launches it now, in a new start-limit
window (docs/config.md, ``start_limit``). Before, the table ignored Start in backoff:
`tenure start` waited out the backoff and answered `failed` when the next automatic
launch hit the start limit. The machine with a fake clock, then the request with a fake
owner; nothing sleeps."""

from __future__ import annotations

from pathlib import Path

from backend.generation import Generation
from backend.instance import (
    TRANSITIONS,
    BackoffElapsed,
    CancelTimer,
    Exited,
    Instance,
    Launch,
    Launched,
    Ready,
    Start,
    State,
    Timer,
)
from backend.model import App, Backoff, Readiness, ReadyKind, StartLimit
from backend.testing import FakeOwner, api_call, run_generation, until

BACKOFF = Backoff(initial=6.0, max=6.0)
LIMIT = StartLimit(burst=3, interval=100.0)


def in_backoff() -> tuple[Instance, float]:
    """An instance whose second run failed: it waits 6 s for its third and last start
    within the start limit (3 starts in 100 s)."""
    app = App(name="bo", stack="d", command=("srv",), ready=Readiness(kind=ReadyKind.NONE),
              backoff=BACKOFF, start_limit=LIMIT)
    inst = Instance(app, 0)
    now = 0.0
    for _ in range(2):
        inst.handle(Start() if inst.state is State.STOPPED else BackoffElapsed(), now)
        inst.handle(Launched(100 + inst.generation, 1), now)
        now += 0.1
        inst.handle(Exited(2, None), now)
    assert inst.state is State.BACKOFF and inst.timers[Timer.BACKOFF] == now + 6.0
    return inst, now


def test_start_in_backoff_launches_now_in_a_new_start_limit_window():
    inst, now = in_backoff()
    acts = inst.handle(Start(), now + 1.0)
    assert acts == [CancelTimer(Timer.BACKOFF), Launch(3, "d/bo/0/3")]
    assert inst.state is State.STARTING and inst.timers == {}
    assert (inst.starts, inst.streak) == ([now + 1.0], 0)
    assert inst.handle(BackoffElapsed(), now + 6.0) == []   # the cancelled timer, late


def test_the_table_maps_start_in_backoff_to_the_explicit_start():
    assert TRANSITIONS[(State.BACKOFF, Start)] is TRANSITIONS[(State.STOPPED, Start)]


def test_tenure_start_in_backoff_launches_at_once(tmp_path: Path):
    config = ('[stacks.d.apps.bo]\ncommand = ["sh", "-c", "exit 2"]\n'
              'backoff = { initial = 6, max = 6 }\n'
              'start_limit = { burst = 3, interval = 100 }\n')

    async def body(gen: Generation, owner: FakeOwner) -> None:
        inst = gen.sup.instances["d/bo/0"]
        for _ in range(2):   # two runs end with exit 2: the second waits 6 s
            await until(lambda: inst.state is State.READY, "up")
            gen.sup.on_observation(owner.exit(inst.launch_key, 2))
        assert inst.state is State.BACKOFF
        answer = await gen.api.start(api_call("start", target="d/bo", timeout=0.5))
        assert answer == {"settled": True, "instances": {"d/bo/0": "ready"}}
        assert [p["launch_key"] for p in owner.sent("launch")] == [
            "d/bo/0/1", "d/bo/0/2", "d/bo/0/3"]
    run_generation(tmp_path, config, body)


def test_ready_after_a_start_in_backoff_counts_a_fresh_streak():
    inst, now = in_backoff()
    inst.handle(Start(), now)
    inst.handle(Launched(200, 1), now)
    assert inst.state is State.READY
    inst.handle(Exited(2, None), now + 0.1)   # first failure of a new streak: at once
    assert inst.state is State.BACKOFF and inst.timers[Timer.BACKOFF] == now + 0.1
    inst.handle(Ready(), now + 0.1)           # ignored in backoff
    assert inst.state is State.BACKOFF
