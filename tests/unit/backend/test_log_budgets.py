"""backend.logbudgets: the config's log_retention told to the owner whole, once per
change, again after a failed call; an owner without logRetention@1 is not called and
the generation says so once. A fake owner; nothing sleeps."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from backend.config import parse_config
from backend.instance import State
from backend.logbudgets import LogBudgets
from backend.testing import FakeOwner, run_generation, until
from protocol.errors import StaleEpoch, TransportLost

CAPS = {"logRetention": 1, "logRetentionKeep": 1}


def _config(**budgets: str) -> Any:
    text = "".join(f'[stacks.s.apps.{app}]\ncommand = ["x"]\n'
                   + (f'log_retention = "{size}"\n' if size else "")
                   for app, size in budgets.items())
    return parse_config(text, "t.toml")


class Owner:
    def __init__(self, default: int | None = None) -> None:
        self.calls: list[tuple[str, Any, int | None]] = []
        self.fail = False
        self.default = default   # answered as the owner's default budget, when given
        self.holds: dict[tuple[str, str], int] = {}   # the budgets in force
        self.lines: set[tuple[str, str]] = set()      # the apps with lines kept

    async def call(self, method: str, params: Any, *, epoch: int | None = None,
                   timeout: float | None = None) -> Any:
        self.calls.append((method, params, epoch))
        if self.fail:
            raise TransportLost("logs.retention: connection lost")
        if self.default is None:
            return {}
        # as owner.journal: a budget of the default is none of the app's own, and an app
        # not named keeps its own while it has lines
        named = {(b["stack"], b["app"]): b["bytes"] for b in params["budgets"]}
        kept = self.lines if params.get("keep") else set()
        self.holds = {k: n for k, n in self.holds.items() if k in kept} | named
        self.holds = {k: n for k, n in self.holds.items() if n != self.default}
        return {"default": self.default, "budgets": [
            {"stack": st, "app": app, "bytes": n} for (st, app), n in sorted(self.holds.items())]}


def _told(owner: Owner) -> dict[str, int]:
    """The budgets of the owner's last logs.retention call, by app."""
    return {b["app"]: b["bytes"] for b in owner.calls[-1][1]["budgets"]}


def test_budgets_are_told_whole_and_once_per_change() -> None:
    async def main() -> None:
        owner, lb = Owner(), LogBudgets()
        cfg = _config(web="256MiB", db="", cron="1G")
        await LogBudgets().sync(owner, 7, {"logRetention": 1}, cfg)   # an older owner:
        assert "keep" not in owner.calls.pop()[1]   # never asked what it does not know
        assert lb.due(cfg)
        await lb.sync(owner, 7, CAPS, cfg)
        assert owner.calls == [("logs.retention", {"budgets": [
            {"stack": "s", "app": "cron", "bytes": 1 << 30},
            {"stack": "s", "app": "web", "bytes": 256 << 20}], "keep": True}, 7)]
        assert not lb.due(cfg)
        await lb.sync(owner, 7, CAPS, _config(web="256MiB", db="", cron="1G"))
        assert len(owner.calls) == 1   # the same budgets: not told again
        await lb.sync(owner, 7, CAPS, _config(web="256MiB", db=""))   # cron back to default
        assert owner.calls[-1][1] == {"budgets": [{"stack": "s", "app": "web",
                                                   "bytes": 256 << 20}], "keep": True}
    asyncio.run(main())


def test_a_failed_call_is_due_again(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        owner, lb = Owner(), LogBudgets()
        cfg = _config(web="2MiB")
        owner.fail = True
        await lb.sync(owner, 1, CAPS, cfg)   # raises nothing
        await lb.sync(owner, 1, CAPS, cfg)
        assert lb.due(cfg) and caplog.text.count("log budgets not set yet") == 1
        owner.fail = False
        await lb.sync(owner, 1, CAPS, cfg)
        assert not lb.due(cfg) and len(owner.calls) == 3
    asyncio.run(main())


def test_an_owner_without_the_call_is_not_asked_and_it_is_said(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        owner, lb = Owner(), LogBudgets()
        with caplog.at_level(logging.WARNING):
            await lb.sync(owner, 1, {}, _config(web="2MiB"))
            await lb.sync(owner, 1, {}, _config(web="4MiB"))
        assert owner.calls == [] and lb.unsupported
        assert caplog.text.count("the owner predates log_retention") == 1
        await lb.sync(owner, 1, {}, _config(web=""))   # nothing wanted: nothing to say
        assert not lb.unsupported
    asyncio.run(main())


def test_a_fenced_generation_stops_telling() -> None:
    async def main() -> None:
        owner, lb = Owner(), LogBudgets()

        async def fenced(method: str, params: Any, *, epoch: int | None = None,
                         timeout: float | None = None) -> Any:
            owner.calls.append((method, params, epoch))
            raise StaleEpoch("epoch 1 is not 2", {"current": 2})
        owner.call = fenced  # type: ignore[method-assign]
        cfg = _config(web="2MiB")
        await lb.sync(owner, 1, CAPS, cfg)
        assert not lb.due(cfg) and len(owner.calls) == 1   # not asked again every second
    asyncio.run(main())


def test_an_apply_tells_the_owner_the_budgets_before_it_launches(tmp_path: Path) -> None:
    """An app that writes fast from its first line is journalled under its own budget:
    told a second later (the loop's tick), the default budget had pruned its first
    lines already (26,219 of a million in the logs benchmark)."""
    new = ('[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n'
           '[stacks.s.apps.w]\ncommand = ["sleep", "1000"]\nlog_retention = "256MiB"\n')

    async def body(gen: Any, owner: FakeOwner) -> None:
        gen.sup.owner_capabilities = {**gen.sup.owner_capabilities, **CAPS}
        before = len(owner.calls)
        await gen.api.apply_text(new, "/new.toml", "up-1")   # as a queued config is
        await until(lambda: "s/w/0" in gen.sup.instances and
                    gen.sup.instances["s/w/0"].state is State.READY, "s/w/0 up")
        calls = [(m, p) for m, p, _ in owner.calls[before:]
                 if m in ("logs.retention", "launch")]
        first = next(i for i, (m, p) in enumerate(calls) if m == "launch" and p["app"] == "w")
        assert calls[:first] == [("logs.retention", {"budgets": [
            {"stack": "s", "app": "w", "bytes": 256 << 20}], "keep": True})], calls
        assert not gen.log_budgets.due(gen.config)
    run_generation(tmp_path, '[stacks.s.apps.a]\ncommand = ["sleep", "1000"]\n', body)


def test_budgets_asked_together_are_told_once() -> None:
    async def main() -> None:
        owner, lb = Owner(), LogBudgets()
        cfg = _config(web="256MiB")
        await asyncio.gather(*(lb.sync(owner, 7, CAPS, cfg) for _ in range(3)))
        assert len(owner.calls) == 1
    asyncio.run(main())


def test_before_launches_budgets_are_raised_and_lowered_a_tick_later() -> None:
    """A smaller budget prunes at once (gigabytes may take minutes); an operation waits
    for what it tells, so it tells the raises only and the loop the rest."""
    async def main() -> None:
        owner, lb = Owner(default=64 << 20), LogBudgets()
        await lb.sync(owner, 1, CAPS, _config(a="1GiB", b="2MiB", c="2MiB"))
        new = _config(a="2MiB", b="256MiB", c="")   # a lowered, b raised, c to the default
        await lb.sync(owner, 1, CAPS, new, lower=False)
        assert _told(owner) == {"a": 1 << 30, "b": 256 << 20, "c": 64 << 20}
        assert lb.due(new)
        await lb.sync(owner, 1, CAPS, new)   # the loop's tick
        assert _told(owner) == {"a": 2 << 20, "b": 256 << 20} and not lb.due(new)
    asyncio.run(main())


def test_a_lowering_alone_waits_for_the_loop() -> None:
    async def main() -> None:
        owner, lb = Owner(default=64 << 20), LogBudgets()
        await lb.sync(owner, 1, CAPS, _config(a="1GiB", b="128MiB"))
        await lb.sync(owner, 1, CAPS, _config(a="2MiB", b=""), lower=False)
        assert len(owner.calls) == 1   # nothing to raise: nothing told
    asyncio.run(main())


def test_budgets_the_owner_may_hold_unknown_are_told_whole() -> None:
    """Before this generation told the owner anything (an older one may have told it
    other budgets), or when the owner did not say its default, raising cannot be
    worked out: the config's budgets go as they are."""
    async def main() -> None:
        owner, lb = Owner(default=64 << 20), LogBudgets()
        await lb.sync(owner, 1, CAPS, _config(a="2MiB"), lower=False)
        assert _told(owner) == {"a": 2 << 20}
        quiet, lb = Owner(), LogBudgets()
        await lb.sync(quiet, 1, CAPS, _config(a="1GiB"))
        await lb.sync(quiet, 1, CAPS, _config(a="2MiB"), lower=False)
        assert _told(quiet) == {"a": 2 << 20}
    asyncio.run(main())


def test_a_removed_app_is_left_to_the_budget_the_owner_keeps() -> None:
    """An app taken out of the config is not told of again (the owner keeps its budget
    while its lines are kept), and an operation's raises leave it as it was told: named
    with the default, it would have lost the budget it had."""
    async def main() -> None:
        owner, lb = Owner(default=64 << 20), LogBudgets()
        owner.lines = {("s", "w")}
        await lb.sync(owner, 1, CAPS, _config(w="1MiB", big="1GiB", x=""))
        new = _config(x="")   # w and big taken out
        await lb.sync(owner, 1, CAPS, new, lower=False)
        assert len(owner.calls) == 1   # nothing to raise: nothing told
        await lb.sync(owner, 1, CAPS, new)   # the loop's tick
        assert _told(owner) == {} and owner.holds == {("s", "w"): 1 << 20}
        assert not lb.due(new)
    asyncio.run(main())


def test_an_app_of_the_config_the_owner_holds_a_budget_for_is_told_the_default() -> None:
    """Its own log_retention removed (or it came back into the config without one
    while its old lines are kept): the owner would keep the budget it holds, so it is
    named with the default, which the owner takes for none of its own."""
    async def main() -> None:
        owner, lb = Owner(default=64 << 20), LogBudgets()
        owner.lines = {("s", "w")}
        await lb.sync(owner, 1, CAPS, _config(w="1GiB"))
        await lb.sync(owner, 1, CAPS, _config())   # taken out: the owner keeps 1 GiB
        assert owner.holds == {("s", "w"): 1 << 30}
        back = _config(w="")
        assert lb.due(back)
        await lb.sync(owner, 1, CAPS, back)
        assert _told(owner) == {"w": 64 << 20} and owner.holds == {}
        await lb.sync(owner, 1, CAPS, back)   # once more, as the owner now holds it
        assert _told(owner) == {} and not lb.due(back)
        calls = len(owner.calls)
        await lb.sync(owner, 1, CAPS, back)
        assert len(owner.calls) == calls
    asyncio.run(main())


def test_an_apply_that_lowers_a_budget_does_not_wait_for_the_prune(tmp_path: Path) -> None:
    """Through the generation: the owner's logs.retention is held (a prune of gigabytes)
    while an apply lowers w's budget and adds x; x starts all the same, and the loop's
    tick then tells the lower budget."""
    first = ('[stacks.s.apps.w]\ncommand = ["sleep", "1000"]\nlog_retention = "1GiB"\n')
    new = ('[stacks.s.apps.w]\ncommand = ["sleep", "1000"]\nlog_retention = "2MiB"\n'
           '[stacks.s.apps.x]\ncommand = ["sleep", "1000"]\n')

    async def body(gen: Any, owner: FakeOwner) -> None:
        gen.sup.owner_capabilities = {**gen.sup.owner_capabilities, **CAPS}
        await gen.tell_log_budgets()   # the loop's first tick
        owner.hold("logs.retention")
        await gen.api.apply_text(new, "/new.toml", "up-1")
        await until(lambda: "s/x/0" in gen.sup.instances and
                    gen.sup.instances["s/x/0"].state is State.READY, "s/x/0 up")
        assert owner.sent("logs.retention") == [{"budgets": [
            {"stack": "s", "app": "w", "bytes": 1 << 30}], "keep": True}]   # the first tick's
        owner.release("logs.retention")
        await gen.tell_log_budgets()   # the loop's next tick
        assert owner.sent("logs.retention")[-1] == {"budgets": [
            {"stack": "s", "app": "w", "bytes": 2 << 20}], "keep": True}
    run_generation(tmp_path, first, body)
