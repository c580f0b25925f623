"""The drain barrier: every change the backend makes runs as a *step*, and a handoff
checkpoint is taken only between steps.

A step is the smallest piece of work that must never be cut in half: one instance of a
rolling restart (stop, then start again), one operation step, a stack intent together
with the stops or starts it implies. While the gate is paused no step begins: an
operation waits at its next boundary (and continues after ``unpause``, or in the next
generation from its durable row), a public request answers ``SHUTTING_DOWN`` there.
``wait_idle`` returns once every step that had begun has ended.

Steps run while the reconciler still acts (the drain freezes it only after the gate is
idle), so a step always gets to finish: freezing first would drop the second half of a
restart — the start — and leave the application stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from protocol.errors import ShuttingDown

from .waiters import Waiters

__all__ = ["StepGate"]


class StepGate:
    """Which steps run, and whether new ones may begin. Construct inside the running loop;
    no clock of its own (timeouts use the loop's)."""

    def __init__(self) -> None:
        self._paused = False
        self._running: dict[int, str] = {}
        self._next = 0
        self._waiters = Waiters()

    @property
    def paused(self) -> bool:
        return self._paused

    def running(self) -> list[str]:
        """Names of the steps that began and have not ended, oldest first."""
        return [self._running[t] for t in sorted(self._running)]

    @contextmanager
    def step(self, name: str, *, continues: bool = False) -> Iterator[None]:
        """Run one step (the ``with`` body, awaits included). Raises ShuttingDown when the
        gate is paused: check ``paused`` first to answer with more detail. With
        ``continues``, the step is the rest of one still running (begun before the
        pause, which lets it finish): it begins even while paused, and a drain waits for
        it as for the step it continues."""
        if self._paused and not continues:
            raise ShuttingDown(f"the backend is draining; {name} did not begin",
                               {"step": name})
        token = self._next
        self._next += 1
        self._running[token] = name
        try:
            yield
        finally:
            del self._running[token]
            self._wake()

    def pause(self) -> None:
        """No step begins from now on; the running ones go on to their end."""
        self._paused = True
        self._wake()

    def unpause(self) -> None:
        self._paused = False
        self._wake()

    async def wait_open(self) -> None:
        """Return once the gate is not paused (at once if it is not)."""
        await self._until(lambda: not self._paused, None)

    async def wait_idle(self, timeout: float) -> bool:
        """Whether every running step ended within ``timeout`` seconds."""
        return await self._until(lambda: not self._running, timeout)

    def _wake(self) -> None:
        self._waiters.wake()

    async def _until(self, done: Callable[[], bool], timeout: float | None) -> bool:
        return await self._waiters.until(done, timeout)
