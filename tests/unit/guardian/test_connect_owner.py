"""How often a starting guardian asks for the owner (guardian.daemon): every 10 ms for
the first second, then less and less often, never less than once a second, and never
after it was told to stop."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from guardian import daemon
from protocol.errors import ConnectFailed


def test_the_first_second_is_asked_every_10_ms_then_backs_off_to_1_s() -> None:
    delays = list(itertools.islice(daemon.connect_delays(), 130))
    assert delays[:100] == [0.01] * 100
    assert abs(sum(delays[:100]) - daemon.FAST_CONNECT_S) < 1e-9
    later = delays[100:]
    assert later[0] == 0.015 and all(b >= a for a, b in itertools.pairwise(later))
    assert later[-1] == 1.0 and max(later) == 1.0


class Owner:
    """connect_owner fails ``fails`` times, then succeeds."""

    def __init__(self, fails: int, stop: asyncio.Event | None = None) -> None:
        self.fails, self.calls, self.stop = fails, 0, stop

    async def connect_owner(self) -> None:
        self.calls += 1
        if self.calls > self.fails:
            return
        if self.stop is not None and self.calls == 3:
            self.stop.set()
        raise ConnectFailed("no socket")


def test_it_connects_as_soon_as_the_owner_answers() -> None:
    co: Any = Owner(fails=4)

    assert asyncio.run(daemon._connect_owner(co, asyncio.Event()))
    assert co.calls == 5


def test_a_stop_ends_the_wait() -> None:
    async def run() -> tuple[bool, Owner]:
        stop = asyncio.Event()
        co = Owner(fails=10**6, stop=stop)
        return await daemon._connect_owner(co, stop), co   # type: ignore[arg-type]
    ok, co = asyncio.run(run())
    assert not ok and co.calls == 3
