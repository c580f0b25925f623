"""Reading the journal for several targets at once: one page, merged in id order.

The owner's ``logs.read`` filters one source (a stack, an app or an instance). For
several, the backend reads a page per source and merges them. Each page is one read
transaction, so a page that was not cut (``more`` false) has every record of its source
up to its ``last_id``, and a cut page every record up to its ``next``. The merged page
holds the records up to the smallest of those marks, and that mark is its ``next`` and
its ``last_id``: continuing ``after`` it neither skips nor repeats a record, although
the sources were read one after the other. A record two targets name (``web`` and
``web/api``) is returned once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .targets import Source

__all__ = ["MAX_SOURCES", "after_time", "coarsen", "merge", "read_sources"]

MAX_SOURCES = 64
"""Sources per merged read (each costs the owner one query per page)."""

Read = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def coarsen(sources: Iterable[Source], keys: Iterable[str]) -> list[Source]:
    """The same records from fewer sources: the instances of an app that are all named
    become the app, the apps of a stack that are all named become the stack."""
    split = [k.split("/") for k in keys]
    chosen = set(sources)
    for s in {(st, app) for st, app, i in chosen if app is not None and i is not None}:
        every = {int(k[2]) for k in split if (k[0], k[1]) == s}
        if every and every <= {i for st, app, i in chosen if (st, app) == s}:
            chosen = {c for c in chosen if (c[0], c[1]) != s} | {(s[0], s[1], None)}
    for stack in {st for st, app, i in chosen if app is not None and i is None}:
        every_app = {k[1] for k in split if k[0] == stack}
        named = {app for st, app, i in chosen if st == stack and i is None}
        if every_app and every_app <= named:
            chosen = {c for c in chosen if c[0] != stack} | {(stack, None, None)}
    chosen = {c for c in chosen if not _subsumed(c, chosen)}
    return sorted(chosen, key=lambda s: (s[0], s[1] or "", -1 if s[2] is None else s[2]))


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


async def read_sources(read: Read, sources: list[Source], params: dict[str, Any]
                       ) -> dict[str, Any]:
    """One page of the records of ``sources`` (at least one) with ``params`` (``after``
    or ``tail``, ``limit``, ``max_bytes``, ``stream``)."""
    pages = [await read({**params, **_filters(s)}) for s in sources]
    if len(pages) == 1:
        return pages[0]
    return merge(pages, params.get("tail"))


def merge(pages: list[dict[str, Any]], tail: int | None) -> dict[str, Any]:
    """See the module docstring. With ``tail``, only the last ``tail`` merged records."""
    upto = min(p["next"] if p["more"] else p["last_id"] for p in pages)
    seen: dict[int, dict[str, Any]] = {}
    for p in pages:
        for r in p["records"]:
            if r["id"] <= upto:
                seen[r["id"]] = r
    records = [seen[i] for i in sorted(seen)]
    if tail is not None:
        records = records[-tail:] if tail > 0 else []
    return {"records": records, "next": upto, "more": any(p["more"] for p in pages),
            "last_id": upto}


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
