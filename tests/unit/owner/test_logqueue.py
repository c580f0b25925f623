"""The journal's fair queue as a pure structure: bounds, fairness, and that every line
offered is accounted for exactly once (queued, written, or counted lost)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from owner.journal import LogSource
from owner.logqueue import LINE_OVERHEAD, FairQueue

APPS = [LogSource("s", name, 0, 1) for name in ("a", "b", "c")]

ops = st.lists(st.one_of(
    st.tuples(st.just("offer"), st.integers(0, 2), st.integers(1, 8), st.integers(0, 300)),
    st.tuples(st.just("take"), st.integers(1, 20)),
    st.just(("written",)),
), max_size=200)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_bounded_fair_and_every_line_accounted_for(script):
    q = FairQueue(4096)
    offered = accepted = lost = done = 0
    batch: list = []
    seq = 0
    for op in script:
        if op[0] == "offer":
            _, who, n, size = op
            src = APPS[who]
            held_before = dict(q._held)
            seq += 1
            got, dropped, _ = q.offer(src, "stdout", 0.0, [b"x" * size] * n, seq)
            offered += n
            accepted += got
            lost += sum(dropped.values())
            mine = held_before.get(("s", src.app), 0) + n * (size + LINE_OVERHEAD)
            for victim, k in dropped.items():
                if victim != src:  # only an app holding more than this one would
                    assert held_before[("s", victim.app)] > mine and k > 0
        elif op[0] == "take" and not batch:
            batch = q.take(op[1])
            assert len({id(i) for i in batch}) == len(batch)
        elif op[0] == "written":
            done += sum(len(i.lines) for i in batch)
            q.written(batch)
            batch = []
        assert 0 <= q.queued_bytes <= q.max_bytes
        assert q.queued_bytes == sum(q._held.values())
    queued = sum(len(i.lines) for i in q._fifo if not i.dropped)
    in_batch = sum(len(i.lines) for i in batch)
    evicted = lost - (offered - accepted)  # accepted first, dropped later for another app
    assert evicted >= 0 and accepted == done + in_batch + queued + evicted
