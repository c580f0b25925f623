"""Reading the journal for several targets at once: one page, merged in id order.

The owner's ``logs.read`` filters one source (a stack, an app or an instance). For
several, the backend reads a page per source and merges them. Each page is one read
transaction, so a page that was not cut (``more`` false) has every record of its source
up to its ``last_id``, and a cut page every record up to its ``next``. The merged page
holds the records up to the smallest of those marks, and that mark is its ``next``:
continuing ``after`` it neither skips nor repeats a record, although the sources were
read one after the other. Its ``last_id`` is the journal's newest id when the first
source was read (every record up to it was there by then): a reader that stops at the
end the journal had when it started stops there, not where a page was cut. A record two
targets name (``web`` and ``web/api``) is returned once. Each source's ``pruned`` (the
sources retention removed records of before they were read, owner.journalpruned) is
passed on, in one list.

A tail (``tail`` N) is the last N records of all the sources together, as of the
journal's newest id when it was asked: the merged page answered for it begins after
the records too many and ends there (its ``last_id``). Every record of that tail is
among the last N of its own source, so the latest start of a source's own last N (of
a source with more than N) bounds where it begins; the records from there are counted
page by page, and only a page is held at a time.

A merged page is no larger than one page of one source: its ``limit`` and ``max_bytes``
(or the owner's defaults) are shared among the sources (``shared``: by an owner that
takes ``max_bytes``, logPages 1).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from protocol.errors import BadRequest

from .targets import Source

__all__ = ["MAX_SOURCES", "after_time", "bounded", "coarsen", "merge", "read_sources"]

MAX_SOURCES = 64
"""Sources per merged read (each costs the owner one query per page)."""
PAGE_RECORDS = 1000
PAGE_BYTES = 1 << 20
"""A page's records and bytes when the reader names none (the owner's defaults, its
``logs.read``): a merged page shares them among its sources, so that it is no larger
than one source's page. Each source read with the whole of them made an answer of up
to N pages, and five busy apps passed the 4 MiB a message may hold."""

Read = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def coarsen(sources: Iterable[Source]) -> list[Source]:
    """The same records, each source once: one another chosen source holds (an
    instance of a chosen app, an app of a chosen stack) is dropped. Sources are never
    widened: the apps of a stack that are all named are not the stack, whose journal
    also holds its jobs' output and the lines of apps since removed (``web/*`` names the
    stack, backend.targets.sources)."""
    chosen = set(sources)
    chosen = {c for c in chosen if not _subsumed(c, chosen)}
    return sorted(chosen, key=lambda s: (s[0], s[1] or "", -1 if s[2] is None else s[2]))


def bounded(sources: Iterable[Source]) -> list[Source]:
    """:func:`coarsen`, refused when more than MAX_SOURCES remain. Raises BadRequest."""
    chosen = coarsen(sources)
    if len(chosen) > MAX_SOURCES:
        raise BadRequest(f"the targets name {len(chosen)} separate apps or instances "
                         f"(at most {MAX_SOURCES} at once); name whole stacks or apps",
                         {"sources": len(chosen)})
    return chosen


def _subsumed(s: Source, chosen: set[Source]) -> bool:
    """Another chosen source holds every record of ``s``."""
    stack, app, instance = s
    return (app is not None and (stack, None, None) in chosen) or \
        (instance is not None and (stack, app, None) in chosen)


def _filters(source: Source) -> dict[str, Any]:
    stack, app, instance = source
    out: dict[str, Any] = {"stack": stack}
    if app is not None:
        out["app"] = app
    if instance is not None:
        out["instance"] = instance
    return out


async def read_sources(read: Read, sources: list[Source], params: dict[str, Any],
                       shared: bool = True) -> dict[str, Any]:
    """One page of the records of ``sources`` (at least one) with ``params`` (``after``
    or ``tail``, ``limit``, ``max_bytes``, ``stream``); with ``tail``, the first page of
    the last ``tail`` records of them all (see the module docstring). ``shared``: the
    owner takes ``max_bytes``, and the page's size is shared among the sources. Raises
    what ``read`` raises."""
    if len(sources) == 1:
        return await read({**params, **_filters(sources[0])})
    p = {k: v for k, v in params.items() if k != "tail"}
    p["limit"] = max(1, p.get("limit", PAGE_RECORDS) // len(sources))
    if shared:
        p["max_bytes"] = max(1, p.get("max_bytes", PAGE_BYTES) // len(sources))
    if params.get("tail") is None:
        return await _merged(read, sources, p)
    start, end = await _tail_start(read, sources, p, params["tail"])
    after = max(p.get("after", 0), start)
    # up to the end the tail was taken at, also when nothing is left before it (-n 0):
    # the page would reach past it, to lines written since
    return await _merged(read, sources, {**p, "after": after},
                         end if after <= end else None)


async def _merged(read: Read, sources: list[Source], params: dict[str, Any],
                  end: int | None = None) -> dict[str, Any]:
    return merge([await read({**params, **_filters(s)}) for s in sources], end)


def merge(pages: list[dict[str, Any]], end: int | None = None) -> dict[str, Any]:
    """See the module docstring. With ``end``, the page stops there and its ``last_id``
    is ``end`` (the end a tail was taken at). ``more`` says a page was cut: records
    above ``next`` that were dropped only because another source was read earlier are
    new, and a follower asks for them at its next poll."""
    marks = [p["next"] if p["more"] else max(p["last_id"], p["next"]) for p in pages]
    upto = min(marks if end is None else [*marks, end])
    seen: dict[int, dict[str, Any]] = {}
    for p in pages:
        for r in p["records"]:
            if r["id"] <= upto:
                seen[r["id"]] = r
    last = min(p["last_id"] for p in pages) if end is None else end
    merged = {"records": [seen[i] for i in sorted(seen)], "next": upto,
              "more": any(p["more"] for p in pages), "last_id": last}
    told = [p["pruned"] for p in pages if p.get("pruned") is not None]
    if told:   # an owner that predates it says nothing of what retention removed
        merged["pruned"] = [g for gaps in told for g in gaps]
    return merged


async def _tail_start(read: Read, sources: list[Source], params: dict[str, Any], n: int
                      ) -> tuple[int, int]:
    """``(after, end)``: the last ``n`` records of ``sources`` up to ``end`` (the
    journal's newest id, once every source's own tail was read) are those after
    ``after``."""
    base = {k: v for k, v in params.items() if k != "after"}
    heads = [await read({**base, **_filters(s), "tail": n, "limit": 1}) for s in sources]
    end = max(h["last_id"] for h in heads)
    if n <= 0:
        return end, end
    floor = await _floor(read, sources, base, heads)
    counts = [(after, len(ids)) async for after, ids in _walk(read, sources, base, floor,
                                                               end)]
    skip = sum(c for _, c in counts) - n
    for after, c in counts:   # the page holding the last record that is too many
        if 0 < skip <= c:
            return await _nth(read, sources, base, after, skip, end), end
        skip -= c
    return floor, end


async def _floor(read: Read, sources: list[Source], base: dict[str, Any],
                 heads: list[dict[str, Any]]) -> int:
    """An id the tail begins after: the latest start of a source's own last N
    (``heads``: each source's first page of them) among the sources that have more
    than N records; 0 when none has."""
    starts = sorted(((h["records"][0]["id"], s) for h, s in zip(heads, sources, strict=True)
                     if h["records"]), key=lambda start: -start[0])
    for first_of_tail, s in starts:
        first = await read({**base, **_filters(s), "after": 0, "limit": 1})
        if first["records"] and first["records"][0]["id"] < first_of_tail:
            return int(first_of_tail) - 1
    return 0


async def _walk(read: Read, sources: list[Source], base: dict[str, Any], after: int,
                end: int) -> AsyncIterator[tuple[int, list[int]]]:
    """``(after, ids)`` of each merged page of the records after ``after`` up to
    ``end``."""
    while after < end:
        page = await _merged(read, sources, {**base, "after": after}, end)
        yield after, [r["id"] for r in page["records"]]
        if page["next"] <= after:   # nothing more below end (a page always moves on)
            return
        after = page["next"]


async def _nth(read: Read, sources: list[Source], base: dict[str, Any], after: int,
               k: int, end: int) -> int:
    """The id of the ``k``-th record after ``after`` (``end`` when there are fewer up
    to ``end``)."""
    async for _, ids in _walk(read, sources, base, after, end):
        if k <= len(ids):
            return ids[k - 1]
        k -= len(ids)
    return end


async def after_time(read: Read, t: float) -> int:
    """The ``after`` id from which the records captured at or after ``t`` (wall clock)
    follow: a binary search over ids, one one-record read per step (ids grow with
    capture time, to within the journal's batching)."""
    first = await read({"after": 0, "limit": 1})
    lo, hi = 0, int(first["last_id"])    # the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        page = await read({"after": mid, "limit": 1})
        if not page["records"] or page["records"][0]["ts"] >= t:
            hi = mid
        else:
            lo = mid + 1
    return lo
