"""`status` and `inspect` ask the owner two things (the sockets it holds, and the
figures of processes not measured lately): both questions are in flight at once, so an
answer costs one round trip to the owner, not two. A fake owner holds each question
until the other has arrived. Nothing sleeps (the loop only yields)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from backend.testing import FakeOwner, api_call, go_stale, ready_generation, until

ONE = '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'
QUESTIONS = ("sockets.list", "metrics.read")
CAPS = {"sockets": 1, "metrics": 1}   # an owner that answers both


def _asked_held(gen: Any, owner: FakeOwner, method: str, params: dict[str, Any]
                ) -> asyncio.Task[Any]:
    """``method`` asked of ``gen``'s API, both questions to the owner held."""
    for q in QUESTIONS:
        owner.hold(q)
    return asyncio.create_task(getattr(gen.api, method)(api_call(method, **params)))


class MeasuringOwner(FakeOwner):
    """Answers ``sockets.list`` (nothing held) and ``metrics.read`` (every live launch
    at 1 MiB); records how many of those two were in flight when each arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.seen_together = 0

    async def call(self, method: str, params: Any = None, *, epoch: int | None = None,
                   timeout: float | None = None, **kw: Any) -> Any:
        if method not in QUESTIONS:
            return await super().call(method, params, epoch=epoch, timeout=timeout, **kw)
        self.in_flight += 1
        self.seen_together = max(self.seen_together, self.in_flight)
        try:
            return await super().call(method, params, epoch=epoch, timeout=timeout, **kw)
        finally:
            self.in_flight -= 1

    def _sockets_list(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"sockets": [], "fd_store": []}

    def _metrics_read(self, p: dict[str, Any]) -> dict[str, Any]:
        return {"at": 0.0, "launches": [
            {"launch_key": k, "pid": r["pid"], "start_ticks": r["start_ticks"],
             "cpu_seconds": 0.0, "memory_bytes": 2**20} for k, r in self.live.items()]}


@pytest.mark.parametrize("method, params", [("inspect", {"target": "s/a"}),
                                            ("status", {})])
def test_the_owner_is_asked_both_questions_at_once(tmp_path: Path, method: str,
                                                   params: dict[str, Any]):
    async def main() -> None:
        owner = MeasuringOwner()
        async with ready_generation(tmp_path, owner, ONE, CAPS) as gen:
            answer = _asked_held(gen, owner, method, params)
            await until(lambda: owner.in_flight == 2, "both questions in flight")
            for q in QUESTIONS:
                owner.release(q)
            got = await answer
            row = got["instances" if method == "inspect" else "apps"][0]
            assert row["rss"] == 2**20
            assert owner.seen_together == 2

    asyncio.run(main())


@pytest.mark.parametrize("method, params", [("inspect", {"target": "s/a"}),
                                            ("status", {})])
def test_figures_still_fresh_are_not_asked_again(tmp_path: Path, method: str,
                                                 params: dict[str, Any]):
    """A second look within FRESH_S asks the owner for its held sockets alone and
    shows the figures the first one got."""
    async def main() -> None:
        owner = MeasuringOwner()
        async with ready_generation(tmp_path, owner, ONE, CAPS) as gen:
            look = getattr(gen.api, method)
            await look(api_call(method, **params))
            asked = len(owner.calls)
            got = await look(api_call(method, **params))
            row = got["instances" if method == "inspect" else "apps"][0]
            assert row["rss"] == 2**20
            assert [m for m, _, _ in owner.calls[asked:]] == ["sockets.list"]

    asyncio.run(main())


@pytest.mark.parametrize("method, params", [("inspect", {"target": "s/a"}),
                                            ("status", {})])
def test_an_owner_silent_for_longer_than_the_stale_limit_is_not_asked(
        tmp_path: Path, method: str, params: dict[str, Any]):
    """Regression: with the owner stopped, `tenure status` waited for both questions
    and ended in TIMEOUT. Once the view is stale, the answer comes at once: the last
    state seen, marked unknown, without figures."""
    async def main() -> None:
        owner = MeasuringOwner()
        async with ready_generation(tmp_path, owner, ONE, CAPS) as gen:
            for q in QUESTIONS:
                owner.hold(q)   # never released: asking would never answer
            go_stale(gen)
            answer = asyncio.create_task(getattr(gen.api, method)(api_call(method,
                                                                           **params)))
            await until(answer.done, "answered")
            got = answer.result()
            row = got["instances" if method == "inspect" else "apps"][0]
            assert (row["state"], row["last_state"], row["rss"]) == ("unknown", "ready",
                                                                     None)
            assert gen.owner_identity is not None   # the test's own process stands in
            assert got["owner_link"]["process"] == \
                f"pid {gen.owner_identity.pid} runs (state R) but did not answer"
            assert not [m for m, _, _ in owner.calls if m in QUESTIONS]

    asyncio.run(main())


def test_metrics_does_not_wait_for_an_owner_silent_past_the_stale_limit(tmp_path: Path):
    """Regression: `tenure metrics` took 19 s with the owner stopped."""
    from backend.metrics import snapshot

    async def main() -> None:
        owner = MeasuringOwner()
        async with ready_generation(tmp_path, owner, ONE, CAPS) as gen:
            owner.hold("metrics.read")   # never released: asking would never answer
            go_stale(gen)
            snap = asyncio.create_task(snapshot(gen))
            await until(snap.done, "answered", turns=5000)
            got = snap.result()
            assert got["owner_connected"] is False
            assert got["apps"][0]["memory_bytes"] is None
            assert not [m for m, _, _ in owner.calls if m in QUESTIONS]

    asyncio.run(main())


@pytest.mark.parametrize(("method", "params"), [("status", {}), ("inspect", {"target": "s"})])
def test_an_owner_gone_silent_during_the_question_is_not_shown_as_current(
        tmp_path: Path, method: str, params: dict[str, Any]):
    """Was: the view's currency was taken before the owner was asked: an owner that went
    silent while it was asked (SIGSTOP) was shown `connected`, with figures, exit 0."""
    async def main() -> None:
        owner = MeasuringOwner()
        async with ready_generation(tmp_path, owner, ONE, CAPS) as gen:
            answer = _asked_held(gen, owner, method, params)
            await until(lambda: any(m in QUESTIONS for m, _, _ in owner.calls), "asked")
            go_stale(gen)               # silent for longer than the limit meanwhile
            for q in QUESTIONS:
                owner.release(q)
            got = await answer
            row = got["instances" if method == "inspect" else "apps"][0]
            assert (row["state"], row["last_state"]) == ("unknown", "ready"), row
            assert got["owner_link"]["current"] is False

    asyncio.run(main())
