"""Merged reads of several journal sources: every record once, in id order, none lost,
against a real journal written while it is read."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.logsel import after_time, coarsen, merge, read_sources
from owner.journal import Journal, LogSource

SOURCES = [LogSource("web", "api", 0, 1), LogSource("web", "api", 1, 1),
           LogSource("web", "worker", 0, 1), LogSource("blog", "web", 0, 1)]


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    j = Journal(tmp_path / "journal.db")
    yield j
    j.close()


def reader(j: Journal, calls: list[dict[str, Any]] | None = None) -> Any:
    """The owner's logs.read over a real journal, as the backend sees it."""
    async def read(q: dict[str, Any]) -> dict[str, Any]:
        if calls is not None:
            calls.append(q)
        page = j.read_page(q.get("after", 0), q["limit"], max_bytes=q.get("max_bytes"),
                           tail=q.get("tail"), stack=q.get("stack"), app=q.get("app"),
                           instance=q.get("instance"), stream=q.get("stream"))
        return {"records": [{"id": r.id, "ts": r.ts, "stack": r.stack, "app": r.app,
                             "instance": r.instance, "data": r.data} for r in page.records],
                "next": page.next, "more": page.more, "last_id": page.last_id}
    return read


def write(j: Journal, n: int, rng: random.Random) -> None:
    for i in range(n):
        j.append(rng.choice(SOURCES), "stdout", [(b"line %d" % i, 0)])
    assert j.flush(10)


def test_following_two_sources_page_by_page_sees_each_record_once(journal: Journal) -> None:
    rng = random.Random(7)
    write(journal, 300, rng)
    chosen = [("web", "api", None), ("blog", None, None)]
    got: list[int] = []
    after = 0
    for _ in range(200):     # pages of 25 while more lines keep arriving
        page = asyncio.run(read_sources(reader(journal), chosen, {"after": after,
                                                                  "limit": 25}))
        got += [r["id"] for r in page["records"]]
        assert page["next"] >= after
        after = page["next"]
        if len(got) < 400 and rng.random() < 0.5:
            write(journal, 10, rng)
        if not page["more"] and after >= journal.last_id():
            break
    everything = asyncio.run(reader(journal)({"after": 0, "limit": 10_000}))["records"]
    want = [r["id"] for r in everything
            if (r["stack"], r["app"]) == ("web", "api") or r["stack"] == "blog"]
    assert got == want and len(set(got)) == len(got)


def test_a_tail_is_the_last_n_of_the_union(journal: Journal) -> None:
    write(journal, 200, random.Random(3))
    page = asyncio.run(read_sources(reader(journal), [("web", "worker", None),
                                                      ("blog", None, None)],
                                    {"tail": 7, "limit": 10_000}))
    everything = asyncio.run(reader(journal)({"after": 0, "limit": 10_000}))["records"]
    want = [r["id"] for r in everything if r["app"] == "worker" or r["stack"] == "blog"]
    assert [r["id"] for r in page["records"]] == want[-7:]
    assert page["last_id"] == page["next"] == journal.last_id()


def read_to_end(read: Any, chosen: list[Any], first: dict[str, Any]) -> list[int]:
    """The ids `tenure logs` prints without -f: ``first``'s page, then the next ones up to
    the end ``first`` says the journal had."""
    end, page, got = first["last_id"], first, []
    while True:
        got += [r["id"] for r in page["records"] if r["id"] <= end]
        if not page["more"] or page["next"] >= end:
            return got
        page = asyncio.run(read_sources(read, chosen, {"after": page["next"],
                                                       "limit": 25}))


@pytest.mark.parametrize("n", [0, 1, 7, 24, 25, 26, 180, 399, 400, 401, 10_000])
def test_a_tail_longer_than_a_page_is_the_last_n_of_all_the_sources(journal: Journal,
                                                                    n: int) -> None:
    """Was: the tail was cut from the first merged page only, and that page said the
    journal ended where it was cut: `tenure logs a b -n 20000` printed 9,534 lines,
    not the newest."""
    rng = random.Random(n)
    for _ in range(400):     # api has most of the lines, blog few
        journal.append(rng.choices(SOURCES, [1, 6, 2, 1])[0], "stdout", [(b"x", 0)])
    assert journal.flush(10)
    read = reader(journal)
    everything = asyncio.run(read({"after": 0, "limit": 10_000}))["records"]
    for chosen in ([("web", "api", None), ("blog", None, None)],
                   [("web", "worker", None), ("web", "api", 1), ("blog", "web", 0)],
                   [("web", None, None), ("web", "api", 0), ("blog", None, None)]):
        want = [r["id"] for r in everything
                if any(_holds(s, r) for s in chosen)]
        first = asyncio.run(read_sources(read, chosen, {"tail": n, "limit": 25}))
        assert read_to_end(read, chosen, first) == (want[-n:] if n else []), (chosen, n)


def test_a_merged_page_is_no_larger_than_one_sources_page(journal: Journal) -> None:
    """Regression: each source was read with a whole page (1 MiB), so six busy apps
    made an answer of up to 6 MiB, past the 4 MiB a message may hold: `tenure logs` of
    them ended in INTERNAL. The page's records and bytes are shared among the sources;
    an owner that does not take max_bytes is not sent it."""
    rng = random.Random(11)
    for _ in range(400):
        journal.append(rng.choice(SOURCES), "stdout", [(b"y" * 4000, 0)])
    assert journal.flush(10)
    calls: list[dict[str, Any]] = []
    chosen = [("web", "api", 0), ("web", "api", 1), ("web", "worker", None),
              ("blog", None, None)]
    page = asyncio.run(read_sources(reader(journal, calls), chosen, {"after": 0}))
    assert {(q["limit"], q["max_bytes"]) for q in calls} == {(250, (1 << 20) // 4)}
    assert sum(len(r["data"]) for r in page["records"]) <= 1 << 20
    calls.clear()
    asyncio.run(read_sources(reader(journal, calls), chosen, {"after": 0, "limit": 100,
                                                             "max_bytes": 4000},
                             shared=False))
    assert {(q["limit"], "max_bytes" in q) for q in calls} == {(25, True)}   # as asked
    calls.clear()
    asyncio.run(read_sources(reader(journal, calls), chosen, {"after": 0}, shared=False))
    assert all("max_bytes" not in q for q in calls)


def test_a_tail_of_none_shows_nothing_written_while_it_was_read(journal: Journal) -> None:
    """Regression: with several targets, `-n 0` read past the journal's end: lines
    written meanwhile were printed."""
    write(journal, 50, random.Random(2))
    plain = reader(journal)

    async def read(q: dict[str, Any]) -> dict[str, Any]:
        journal.append(SOURCES[0], "stdout", [(b"late", 0)])   # lines keep coming
        assert journal.flush(10)
        return await plain(q)
    chosen = [("web", "api", None), ("blog", None, None)]
    page = asyncio.run(read_sources(read, chosen, {"tail": 0}))
    assert page["records"] == [] and page["next"] == page["last_id"]


def _holds(source: Any, r: dict[str, Any]) -> bool:
    stack, app, instance = source
    return r["stack"] == stack and app in (None, r["app"]) and \
        instance in (None, r["instance"])


def test_a_merged_page_ends_the_journal_where_it_ended_not_where_a_page_was_cut(
        journal: Journal) -> None:
    """Was: its last_id was the cut, so a read without -f stopped after one page."""
    write(journal, 300, random.Random(5))
    chosen = [("web", "api", None), ("blog", None, None)]
    read = reader(journal)
    first = asyncio.run(read_sources(read, chosen, {"after": 0, "limit": 25}))
    assert first["more"] and first["next"] < first["last_id"] == journal.last_id()
    everything = asyncio.run(read({"after": 0, "limit": 10_000}))["records"]
    assert read_to_end(read, chosen, first) == [r["id"] for r in everything
                                                if any(_holds(s, r) for s in chosen)]


def test_one_source_is_passed_through_and_overlapping_ones_are_merged_once() -> None:
    rec = [{"id": i, "ts": 0.0} for i in (1, 2, 5)]
    a = {"records": rec, "next": 5, "more": False, "last_id": 9}
    b = {"records": [*rec[1:], {"id": 7, "ts": 0.0}], "next": 7, "more": True,
         "last_id": 9}
    out = merge([a, b], None)
    assert [r["id"] for r in out["records"]] == [1, 2, 5, 7]
    assert (out["next"], out["more"], out["last_id"]) == (7, True, 9)


def test_a_merged_page_passes_on_what_retention_removed_of_each_source(
        tmp_path: Path) -> None:
    """Each source's page names what retention pruned of it above the read; the merged
    page names them all. An owner that predates ``pruned`` answers without it, and so
    does the merged page (a reader then says nothing)."""
    api, worker = SOURCES[0], SOURCES[2]
    ids: dict[str, list[int]] = {"api": [], "worker": []}
    with Journal(tmp_path / "j.db", retention_bytes_per_app=64 << 10) as j:
        for _ in range(100):   # each app outruns its budget
            for src, stream in ((api, "stdout"), (worker, "stderr")):
                j.append(src, stream, [(b"x" * 1000, 0)])
                assert j.flush(10)
                ids[src.app].append(j.last_id())

        async def read(q: dict[str, Any]) -> dict[str, Any]:
            return j.read_page(q.get("after", 0), q["limit"], stack=q.get("stack"),
                               app=q.get("app"), instance=q.get("instance")).to_wire()
        chosen = [("web", "api", 0), ("web", "worker", None)]
        page = asyncio.run(read_sources(read, chosen, {"after": 0, "limit": 1000}))
    kept = {r["id"] for r in page["records"]}
    lost = {app: max(i for i in got if i not in kept) for app, got in ids.items()}
    assert page["pruned"] == [
        {"stack": "web", "app": "api", "instance": 0, "stream": "stdout", "after": 0,
         "last_id": lost["api"]},
        {"stack": "web", "app": "worker", "instance": 0, "stream": "stderr", "after": 0,
         "last_id": lost["worker"]}]
    old = {"records": [], "next": 3, "more": False, "last_id": 3}
    assert "pruned" not in merge([old, old])


def test_coarsen_drops_what_another_source_holds_and_never_widens() -> None:
    """Every app of a stack named is not the stack: that read its jobs' output too."""
    assert coarsen([("web", "api", 0), ("web", "api", 1)]) == \
        [("web", "api", 0), ("web", "api", 1)]
    assert coarsen([("web", "api", None), ("web", "worker", None)]) == \
        [("web", "api", None), ("web", "worker", None)]
    assert coarsen([("web", "api", 0), ("web", None, None)]) == [("web", None, None)]
    assert coarsen([("web", "api", 0), ("web", "api", None), ("blog", "web", None)]) == \
        [("blog", "web", None), ("web", "api", None)]


def test_a_last_star_names_the_whole_parent() -> None:
    from backend.targets import sources
    keys = ["web/api/0", "web/api/1", "web/worker/0"]
    assert sources(keys, "web/*") == [("web", None, None)]
    assert sources(keys, "web/api/*") == [("web", "api", None)]
    assert sources(keys, "web/a*") == [("web", "api", None)]
    assert sources(keys, "*/*") == [("web", None, None)]
    assert sources(keys, "web/api/0") == [("web", "api", 0)]


def test_after_time_finds_the_first_record_at_or_after_a_time(tmp_path: Path) -> None:
    clock = [1000.0]
    j = Journal(tmp_path / "j.db", clock=lambda: clock[0])
    try:
        for t in range(40):
            clock[0] = 1000.0 + t
            j.append(SOURCES[t % 4], "stdout", [(b"at %d" % t, 0)])
            assert j.flush(10)
        calls: list[dict[str, Any]] = []
        read = reader(j, calls)
        after = asyncio.run(after_time(read, 1025.0))
        assert len(calls) <= 2 + math.ceil(math.log2(40))   # a binary search, not a scan
        first = asyncio.run(read({"after": after, "limit": 1}))["records"][0]
        assert first["ts"] == 1025.0 and first["data"] == b"at 25"
        assert asyncio.run(after_time(read, 0.0)) == 0
        assert asyncio.run(after_time(read, 5000.0)) == j.last_id()
    finally:
        j.close()
