"""The order in which the owner's shutdown stops the applications: the reverse of their
start order along ``after``, as the backend's own stops go (backend.start_order).

The owner does not read the config: the backend tells it each stack's order
(``stack.stop_order``, capability ``stopOrder@1``) whenever the applied config changes,
and the owner keeps it in owner.db, so that a shutdown with no backend left (`tenure
down`, the machine's shutdown) still goes in order. A stack's order is a list of levels
of app names, the first to stop first.

At shutdown every launch that may still run gets a level: its app's level in its stack's
order, or 0 for an app the order does not name and a stack without one (they stop first,
as an apply stops an app the config does not name first). Level n of every stack stops
together, once each launch of the levels before it is gone or its stop ended (stopped,
or failed: a stuck stop does not keep the rest running). The shutdown's budget is the
sum, over the levels, of the longest stop policy in each.

A stored order that cannot be read (a damaged row) is not a reason to keep apps
running: it is logged and the shutdown stops every launch at once, as an owner without
an order does.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from protocol.errors import TenureError
from protocol.schema import check_name

__all__ = ["CAPABILITY", "MAX_NAMES", "budget", "check_order", "levels", "load",
           "parse_rows"]

log = logging.getLogger(__name__)

CAPABILITY = ("stopOrder", 1)
MAX_NAMES = 100_000   # app names in one stack.stop_order call, all stacks together

Order = dict[str, list[list[str]]]
_name = check_name(128)


def check_order(stacks: Any) -> str | None:
    """Why ``stacks`` (stack name -> levels, each a list of app names) is not an order
    the owner keeps; None when it is. An app may be named once per stack."""
    if not isinstance(stacks, dict):
        return "must map each stack to its levels"
    count = 0
    for stack, layers in stacks.items():
        if not isinstance(stack, str) or _name(stack) is not None:
            return "each stack must be a name (1-128 printable, no '/')"
        if not isinstance(layers, list) or not all(isinstance(lv, list) for lv in layers):
            return f"stack {stack!r}: its levels must be a list of lists of app names"
        names = [a for lv in layers for a in lv]
        if not all(isinstance(a, str) and _name(a) is None for a in names):
            return f"stack {stack!r}: each app must be a name (1-128 printable, no '/')"
        if len(set(names)) != len(names):
            return f"stack {stack!r}: an app is named twice"
        count += len(names)
        if count > MAX_NAMES:
            return f"must name at most {MAX_NAMES} apps"
    return None


def load(rows: Callable[[], Iterable[tuple[str, str]]]) -> Order:
    """The stored order, from ``rows()`` (OwnerStore.stop_order); {} when it cannot be
    read (logged): no reason to keep an app running at shutdown."""
    try:
        return parse_rows(rows())
    except (sqlite3.Error, TenureError) as exc:
        log.error("the stop order cannot be read (%s): the shutdown stops every "
                  "application at once", exc)
        return {}


def parse_rows(rows: Iterable[tuple[str, str]]) -> Order:
    """The order stored as (stack, levels as JSON) rows. A damaged row makes the whole
    order unknown ({}): logged; the shutdown then stops everything at once."""
    order: Order = {}
    for stack, text in rows:
        try:
            layers = json.loads(text)
        except (TypeError, ValueError, RecursionError):
            layers = None
        if check_order({stack: layers}) is not None:
            log.error("the stored stop order of stack %r is damaged: the shutdown stops "
                      "every application at once", stack)
            return {}
        order[stack] = layers
    return order


def levels(keys: Iterable[str], app_of: Callable[[str], tuple[str, str] | None],
           order: Mapping[str, list[list[str]]]) -> list[list[str]]:
    """``keys`` (launches) grouped by level, the first to stop first; ``app_of`` gives a
    launch's (stack, app), None when unknown (level 0)."""
    by_level: dict[int, list[str]] = {}
    for key in keys:
        by_level.setdefault(_level(app_of(key), order), []).append(key)
    return [by_level[n] for n in sorted(by_level)]


def _level(app: tuple[str, str] | None, order: Mapping[str, list[list[str]]]) -> int:
    if app is None:
        return 0
    for n, layer in enumerate(order.get(app[0], ())):
        if app[1] in layer:
            return n
    return 0


def budget(groups: list[list[str]], policy: Callable[[str], float]) -> float:
    """How long stopping ``groups`` level by level may take by the launches' own stop
    policies (``policy``: a launch's timeout and kill_after): the sum of each level's
    longest."""
    return sum(max((policy(k) for k in group), default=0.0) for group in groups)
