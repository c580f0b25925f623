"""An exit the backend hears of from the owner's observations is told at the time the
owner saw it happen (its ``at``), not when this generation read it: after a backend
outage the owner's backlog is replayed seconds or hours later. Was: every such `exit`
event carried the replay's time, though docs/cli.md says `at` is when it ended. An
observation without a usable ``at`` (an older owner, a damaged value) is told now."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

from backend.events import EventLog
from backend.testing import FakeOwner, run_generation

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\nrestart = "never"\n'


def _exit_event(tmp_path: Path, stopped: bool, at: Any) -> dict[str, Any]:
    got: list[dict[str, Any]] = []

    async def body(gen: Any, owner: FakeOwner) -> None:
        sup = gen.sup
        events = sup.events = EventLog(gen.store, gen.activation)
        key = sup.instances["s/a/0"].launch_key
        e = owner.exit(key, 3, None)
        e["stopped"] = stopped
        if at is not None:
            e["at"] = at
        sup.on_observation(e)
        events.flush()
        got.extend(x for x in events.read(after=0)["events"] if x["kind"] == "exit")

    run_generation(tmp_path, ONE, body)
    (event,) = got
    return event


@pytest.mark.parametrize("stopped", [False, True])
def test_a_replayed_exit_is_told_at_the_time_the_owner_saw_it(tmp_path: Path,
                                                               stopped: bool) -> None:
    ended = time.time() - 3600.0          # an hour before this generation heard of it
    event = _exit_event(tmp_path, stopped, ended)
    assert event["at"] == ended
    assert event["data"]["exit_code"] == 3 and event["data"]["requested"] is stopped


@pytest.mark.parametrize("at", [None, math.nan, math.inf, "noon", True])
def test_an_exit_without_a_usable_time_is_told_now(tmp_path: Path, at: Any) -> None:
    before = time.time()
    event = _exit_event(tmp_path, False, at)
    assert before <= event["at"] <= time.time()
