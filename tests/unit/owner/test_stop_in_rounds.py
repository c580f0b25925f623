"""The shutdown's stop of processes no launch accounts for reads the owner's children
again every round. Was: it read them once, so the child of one that died (re-parented to
the owner) was never signalled and ran on under init; and it counted what it listed,
not what it signalled."""

from __future__ import annotations

import asyncio
import signal

from owner.descendants import STOP_ROUND_S, stop_in_rounds


class _World:
    """Fake processes on a fake clock: a process ends at the first SIGTERM (or SIGKILL)
    unless it ignores SIGTERM; ``children`` of one join the list when it ends."""

    def __init__(self, procs: list[tuple[int, int]], children: dict[int, list[tuple[int, int]]],
                 ignores_term: frozenset[int] = frozenset()) -> None:
        self.t = 0.0
        self.listed_now = list(procs)
        self.children = children
        self.ignores_term = ignores_term
        self.sent: list[tuple[int, int]] = []   # (pid, signal)

    def listed(self) -> list[tuple[int, int]]:
        return list(self.listed_now)

    def now(self) -> float:
        return self.t

    async def sleep(self, s: float) -> None:
        self.t += s

    def kill(self, pid: int, ticks: int, sig: int) -> bool:
        if (pid, ticks) not in self.listed_now:
            return False
        self.sent.append((pid, sig))
        if sig == signal.SIGKILL or pid not in self.ignores_term:
            self.listed_now.remove((pid, ticks))
            self.listed_now += self.children.pop(pid, [])
        return True


def _run(w: _World, grace: float = 5.0) -> list[int]:
    return asyncio.run(stop_in_rounds(w.listed, grace, w.now, w.sleep, w.kill))


def test_the_children_of_a_stopped_process_are_stopped_too() -> None:
    w = _World([(10, 1)], {10: [(11, 2)], 11: [(12, 3)]})
    assert _run(w) == [10, 11, 12]
    assert w.sent == [(10, signal.SIGTERM), (11, signal.SIGTERM), (12, signal.SIGTERM)]
    assert w.listed_now == []
    assert w.t < 1.0   # no waiting for the grace once none is left


def test_what_ignores_sigterm_is_killed_after_the_grace() -> None:
    w = _World([(10, 1)], {10: [(11, 2)]}, ignores_term=frozenset({10, 11}))
    assert _run(w, grace=1.0) == [10, 11]
    assert w.sent == [(10, signal.SIGTERM), (10, signal.SIGKILL), (11, signal.SIGKILL)]
    assert 1.0 <= w.t < 1.0 + 3 * STOP_ROUND_S


def test_only_what_was_signalled_is_counted() -> None:
    w = _World([(10, 1)], {})
    w.kill = lambda pid, ticks, sig: False   # type: ignore[method-assign]  # a stranger now
    assert _run(w, grace=0.1) == []


def test_it_gives_up_a_grace_after_sigkill() -> None:
    w = _World([(10, 1)], {})
    w.kill = lambda pid, ticks, sig: True   # type: ignore[method-assign]  # never ends
    assert _run(w, grace=0.5) == [10]
    assert 1.0 <= w.t < 1.0 + 3 * STOP_ROUND_S


def test_each_process_gets_each_signal_once() -> None:
    w = _World([(10, 1)], {}, ignores_term=frozenset({10}))
    sent: list[int] = []
    real = w.kill

    def kill(pid: int, ticks: int, sig: int) -> bool:
        sent.append(sig)
        return real(pid, ticks, sig)
    w.kill = kill   # type: ignore[method-assign]
    _run(w, grace=0.2)
    assert sent == [signal.SIGTERM, signal.SIGKILL]
