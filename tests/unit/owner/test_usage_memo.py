"""owner.metrics.UsageMemo: which usage-only requests a kept measurement answers."""

from __future__ import annotations

from owner.metrics import USAGE_REUSE_S, UsageMemo


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


A, B = ("k1", 10, 5), ("k2", 11, 6)


def kept(clock: Clock, *launches: tuple[str, int, int]) -> UsageMemo:
    memo = UsageMemo(clock)
    memo.keep(1, clock.now, list(launches), [{"memory_bytes": n} for n, _ in
                                             enumerate(launches)])
    return memo


def test_another_client_gets_the_kept_measurement_once():
    clock = Clock()
    memo = kept(clock, A, B)
    assert memo.reuse(1, [A]) is None                     # it was made for client 1
    assert memo.reuse(2, [B, A]) == (100.0, [{"memory_bytes": 1}, {"memory_bytes": 0}])
    assert memo.reuse(2, [A]) is None                     # client 2 has had it
    assert memo.reuse(3, []) is None                      # nothing asked: nothing kept


def test_it_answers_only_while_young_and_only_for_what_it_measured():
    clock = Clock()
    memo = kept(clock, A)
    assert memo.reuse(2, [A, B]) is None                  # B was not measured
    assert memo.reuse(3, [("k1", 10, 7)]) is None         # another process under k1
    assert memo.reuse(4, [("k1", 12, 5)]) is None
    clock.now += USAGE_REUSE_S
    assert memo.reuse(5, [A]) is None                     # too old


def test_a_narrower_measurement_does_not_displace_a_fresh_wider_one():
    clock = Clock()
    memo = kept(clock, A, B)
    clock.now += 0.1
    memo.keep(7, clock.now, [A], [{"memory_bytes": 9}])   # an inspect of one app
    assert memo.reuse(8, [A, B]) == (100.0, [{"memory_bytes": 0}, {"memory_bytes": 1}])
    clock.now += USAGE_REUSE_S                            # the wide one is old now
    memo.keep(7, clock.now, [A], [{"memory_bytes": 9}])
    assert memo.reuse(8, [A]) == (clock.now, [{"memory_bytes": 9}])
