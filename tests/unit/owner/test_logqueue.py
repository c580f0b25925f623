"""The journal's fair queue as a pure structure: bounds, fairness, and that every line
offered is accounted for exactly once (queued, written, or counted lost)."""

from __future__ import annotations

import time
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from owner.journalsource import LogSource
from owner.linesplit import LineSplitter
from owner.logqueue import FairQueue, fit

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
            mine = held_before.get(("s", src.app), 0) + fit([b"x" * size] * n, 1 << 60)[2]
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


def _held_memory(snapshot: tracemalloc.Snapshot) -> int:
    """The bytes the blocks of ``snapshot`` take: their sizes as pymalloc allocates
    them (16-byte classes up to 512 bytes; tracemalloc counts what was asked)."""
    return sum(-(-t.size // 16) * 16 if t.size <= 512 else t.size
               for t in snapshot.traces)


@pytest.mark.parametrize(("lines_per_append", "appends"), [(2000, 5), (1, 5000)])
def test_a_queue_of_short_lines_is_charged_at_least_what_it_holds(
        lines_per_append: int, appends: int) -> None:
    """Was: 64 bytes a line besides its data, and nothing an append, where a one-byte
    line held ~90 (a bytearray, its buffer, a list slot) and an append ~300: a full
    queue held ~40% more than its bound, appends of one line several times more."""
    chunks = [bytearray(b"x\n" * lines_per_append) for _ in range(appends)]
    splitter, q = LineSplitter(), FairQueue(1 << 40)
    tracemalloc.start()
    try:
        for seq, chunk in enumerate(chunks, 1):   # as the journal's drainers do
            lines, flags = splitter.split(chunk)
            q.offer(APPS[0], "stdout", time.time(), lines, seq, flags)
        held = _held_memory(tracemalloc.take_snapshot())
    finally:
        tracemalloc.stop()
    assert q.queued_bytes >= held, (q.queued_bytes, held)
    assert q.queued_bytes <= 1.5 * held   # not so much that the bound wastes the room
