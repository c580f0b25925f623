"""backend.start_order through a generation on a fake owner: a start waits while an
`after` app is on its way up, whichever order the starts were fed in, and starts all
the same once ORDER_WAIT is up."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from backend import start_waits
from backend.instance import Start, State, StopRequested
from backend.start_order import waits_for
from backend.testing import FakeOwner, run_generation, until_time

ORDERED = """
[stacks.o.apps.db]
command = ["sleep", "1000"]
ready = { kind = "delay", delay = 0.4 }

[stacks.o.apps.api]
command = ["sleep", "1000"]
after = ["db"]
"""


async def _stop_both(sup: Any) -> None:
    await until_time(lambda: "o/api/0" in sup.instances and "o/db/0" in sup.instances, "both")
    for key in ("o/api/0", "o/db/0"):
        sup.feed(key, StopRequested())
    await until_time(lambda: all(i.state is State.STOPPED for i in sup.instances.values()),
                "both stopped")


def test_the_dependent_waits_whichever_start_is_fed_first(tmp_path: Path) -> None:
    async def body(gen: Any, owner: FakeOwner) -> None:
        sup = gen.sup
        await _stop_both(sup)
        sup.feed("o/api/0", Start())          # before its dependency's start
        sup.feed("o/db/0", Start())
        await until_time(lambda: sup.instances["o/db/0"].state is State.RUNNING, "db up")
        assert sup.instances["o/api/0"].state is State.STOPPED
        assert waits_for(sup.instances, sup.starts.waiting(), "o/api/0") == ["o/db/0"]
        await until_time(lambda: sup.instances["o/db/0"].state is State.READY, "db ready")
        await until_time(lambda: sup.instances["o/api/0"].state is State.READY, "api after")
        assert sup.instances["o/api/0"].launched_at >= sup.instances["o/db/0"].launched_at

    run_generation(tmp_path, ORDERED, body, ready=False)


def test_a_start_that_waited_too_long_goes_all_the_same(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.setattr(start_waits, "ORDER_WAIT", 0.1)

    async def body(gen: Any, owner: FakeOwner) -> None:
        sup = gen.sup
        await _stop_both(sup)
        sup.feed("o/db/0", Start())
        sup.feed("o/api/0", Start())
        await asyncio.sleep(0.2)
        await until_time(lambda: sup.instances["o/api/0"].state is State.READY, "api anyway")
        assert sup.instances["o/db/0"].state is State.RUNNING    # not ready yet

    run_generation(tmp_path, ORDERED.replace("delay = 0.4", "delay = 5"), body, ready=False)
