"""protocol.seldom: the first occurrence is said at once, then at most one line per
interval, each with the occurrences since the last."""

from __future__ import annotations

from protocol.seldom import Seldom


def test_a_flood_is_said_once_per_interval_with_its_count() -> None:
    now = [0.0]
    s = Seldom(60.0, lambda: now[0])
    said = []
    for _ in range(1000):                  # 1000 occurrences over 100 s
        said.append(s.due())
        now[0] += 0.1
    assert [n for n in said if n] == [1, 600]        # at 0 s and at 60 s
    now[0] = 121.0
    assert (s.due(), s.total) == (400, 1001)           # the 399 since, and this one
    assert s.due() == 0


def test_an_end_is_said_once_and_the_next_trouble_at_once() -> None:
    now = [0.0]
    s = Seldom(30.0, lambda: now[0])
    assert s.ended() is False                         # nothing happened: nothing to say
    assert s.due() == 1
    now[0] = 5.0
    assert s.due() == 0 and s.ended() is True and s.ended() is False
    assert s.due() == 1                               # a new streak: said at once
