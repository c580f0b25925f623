"""The reconciler's readiness and health checks: at most one runner of each kind per
instance, started and stopped as the instance machine asks (StartReadiness,
StopReadiness, StartHealth, StopHealth), whose verdicts come back as machine events.

A verdict is fed only while it is still the word of the check that runs: a replaced
health check's last verdict is dropped, and a failed attempt's ``Probed`` note only
while the instance is on the generation the check was started for.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from protocol.errors import TenureError

from . import explain
from . import instance as im
from .probes import (
    HealthRunner,
    Held,
    ProbeRunner,
    Verdict,
    describe,
    group_of,
    health_probe,
    readiness_probe,
)

if TYPE_CHECKING:
    from .owner_mutations import OwnerCalls

__all__ = ["Checks"]

log = logging.getLogger("tenure.backend")

Runner = ProbeRunner | HealthRunner


class Checks:
    """The running checks of a reconciler's instances. ``feed(key, event)`` takes their
    verdicts; ``instances`` is the reconciler's own map (read, never changed);
    ``capabilities()`` the owner's and ``base_env()`` the environment every probe
    command gets, both as of now; ``spawn`` runs a closing runner's ``aclose`` in the
    background."""

    def __init__(self, owner: OwnerCalls, instances: Mapping[str, im.Instance],
                 feed: Callable[[str, im.Event], None],
                 capabilities: Callable[[], Mapping[str, int]],
                 base_env: Callable[[], Mapping[str, str]],
                 spawn: Callable[[Awaitable[Any]], None]) -> None:
        self._owner = owner
        self._instances = instances
        self._feed = feed
        self._capabilities = capabilities
        self._base_env = base_env
        self._spawn = spawn
        self._ready: dict[str, ProbeRunner] = {}
        self._health: dict[str, HealthRunner] = {}

    def start_readiness(self, key: str, inst: im.Instance) -> None:
        ready = inst.app.ready
        probe = readiness_probe(ready, inst.index, group_of(inst.pid),
                                env={**self._base_env(), **inst.app.env}, cwd=inst.app.cwd,
                                held=self._held_sockets(inst.launch_key))
        if probe is None:
            return  # notify: the owner's READY event; delay: the machine's own timer
        # The machine's ready-timeout timer ends readiness and cancels this runner; the
        # runner's own deadline is a second later, so no attempt is cut before that timer.
        runner = ProbeRunner(probe, interval=ready.interval, timeout=ready.timeout + 1.0,
                             on_attempt=self._on_probe(key, explain.Check.READINESS,
                                                       describe(ready, inst.index),
                                                       inst.generation))
        self._close(self._ready.pop(key, None))
        self._ready[key] = runner
        runner.start(lambda ok: self._feed(key, im.Ready()) if ok else None)

    def stop_readiness(self, key: str) -> None:
        self._close(self._ready.pop(key, None))

    def start_health(self, key: str, inst: im.Instance) -> None:
        h = inst.app.health
        if h is None:
            return

        def verdict(event: im.Event) -> Callable[[], None]:
            def feed() -> None:
                if self._health.get(key) is runner:   # not a replaced check's last word
                    self._feed(key, event)
            return feed
        check = health_probe(h, inst.index, group_of(inst.pid),
                             env={**self._base_env(), **inst.app.env}, cwd=inst.app.cwd,
                             held=self._held_sockets(inst.launch_key))
        runner = HealthRunner(check, interval=h.interval, timeout=h.timeout, grace=h.grace,
                              on_pass=verdict(im.HealthOk()), on_fail=verdict(im.HealthFailed()),
                              on_attempt=self._on_probe(key, explain.Check.HEALTH,
                                                        describe(h, inst.index),
                                                        inst.generation))
        self._close(self._health.pop(key, None))
        self._health[key] = runner
        runner.start()

    def stop_health(self, key: str) -> None:
        self._close(self._health.pop(key, None))

    async def aclose(self) -> None:
        """Stop every check and wait for each runner to end."""
        runners: list[Runner] = [*self._ready.values(), *self._health.values()]
        self._ready.clear()
        self._health.clear()
        await asyncio.gather(*(r.aclose() for r in runners), return_exceptions=True)

    def _on_probe(self, key: str, check: explain.Check, what: str,
                  generation: int) -> Callable[[Verdict], None]:
        """Feeds a failed attempt as ``Probed`` (when it says something new) while the
        instance is still on ``generation``."""
        def seen(verdict: Verdict) -> None:
            inst = self._instances.get(key)
            if verdict.ok or inst is None or inst.generation != generation:
                return
            note = explain.LastProbe(check, what, verdict.said, generation)
            if inst.last_probe != note:
                self._feed(key, im.Probed(note))
        return seen

    def _held_sockets(self, launch_key: str) -> Held | None:
        """The owner's ``launch.sockets`` for a tcp probe, or None when it predates it."""
        if self._capabilities().get("socketInodes") != 1:
            return None

        async def held() -> set[int] | None:
            try:
                r = await self._owner.call("launch.sockets", {"launch_key": launch_key},
                                           timeout=2.0)
            except TenureError:
                return None  # gone or out of reach: the probe reads /proc instead
            return set(r["inodes"])
        return held

    def _close(self, runner: Runner | None) -> None:
        if runner is not None:
            self._spawn(runner.aclose())
