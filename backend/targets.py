"""Targets: which instances a command names.

A target is ``STACK``, ``STACK/APP`` or ``STACK/APP/N``, and each part may be a
shell-style glob (``*``, ``?``, ``[...]``): ``web``, ``web/api``, ``web/api/2``,
``'web/*'``, ``'*/worker'``, ``'web/api/[01]'``. A target names every instance key
(``stack/app/index``) whose first parts match it part by part, so ``web/a*`` names all
instances of every app of ``web`` that begins with ``a``; a target with a glob never
matches across a ``/``.

A target that names nothing is an error (``NOT_FOUND``) on every command: a typo must
not look like an empty stack.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from protocol.errors import BadRequest, NotFound

TYPE_CHECKING = False
if TYPE_CHECKING:  # the command line checks its targets here: typing would cost it ms
    from typing import Any

__all__ = ["MAX_TARGETS", "Source", "check_cli_targets", "check_target", "check_targets",
           "exact_source", "in_order", "is_glob", "is_index", "journal_target", "known_near",
           "order_key", "select", "select_all", "source_target", "sources"]

MAX_TARGETS = 64
_GLOB = frozenset("*?[")

# A log source as the owner's journal filters it: (stack, app or None, instance or None)
Source = tuple[str, str | None, int | None]


def is_glob(target: str) -> bool:
    return any(c in _GLOB for c in target)


def is_index(text: str) -> bool:
    """Whether ``text`` is an instance number as tenure writes one: ASCII digits, no
    leading zero (``str.isdigit`` takes ``²``, which ``int`` refuses, and ``٣``)."""
    return text.isascii() and text.isdigit() and (text == "0" or text[0] != "0")


def check_target(v: str) -> str | None:
    """Schema check: 1 to 3 non-empty parts; a part without a glob that is the instance
    must be a number."""
    if not v or len(v) > 300 or not v.isprintable() or any(c.isspace() for c in v):
        return "must be 1 to 300 printable characters without spaces"
    parts = v.split("/")
    if not 1 <= len(parts) <= 3 or not all(parts):
        return "must be STACK, STACK/APP or STACK/APP/N (each part may be a glob)"
    if len(parts) == 3 and not is_glob(parts[2]) and not is_index(parts[2]):
        index = parts[2]
        if index.isascii() and index.isdigit():
            return f"instance {index!r} is written without leading zeros ({int(index)})"
        return f"instance {index!r} is not a number"
    if len(parts) == 3 and len(parts[2]) > 9 and not is_glob(parts[2]):   # no app has
        return f"instance {parts[2]} is out of range"   # as many; the wire takes 64 bits
    return None


def check_targets(v: list[object]) -> str | None:
    if len(v) > MAX_TARGETS:
        return f"at most {MAX_TARGETS} targets"
    for t in v:
        if not isinstance(t, str):
            return "each target must be a string"
        if (why := check_target(t)) is not None:
            return f"{t!r}: {why}"
    return None


def check_cli_targets(targets: list[str]) -> None:
    """The command line's check of its targets, in the operator's terms (``target
    'web/api/x': instance 'x' is not a number``, not the wire's parameter name), before
    any daemon is asked; the same rules as the backend's schema. Raises BadRequest."""
    if len(targets) > MAX_TARGETS:
        raise BadRequest(f"at most {MAX_TARGETS} targets at once", {"field": "targets"})
    for t in targets:
        if (why := check_target(t)) is not None:
            raise BadRequest(f"target {t!r}: {why}", {"field": "targets", "target": t})


def _matches(key: str, parts: list[str]) -> bool:
    have = key.split("/")
    return len(have) >= len(parts) and all(
        fnmatchcase(h, p) for h, p in zip(have, parts, strict=False))


def order_key(key: str) -> tuple[str, str, int, str]:
    """The sort key of :func:`in_order`."""
    stack, _, rest = key.partition("/")
    app, _, index = rest.partition("/")
    return stack, app, int(index) if is_index(index) else -1, index


def in_order(keys: Iterable[str]) -> list[str]:
    """Instance keys as an operator reads them: by stack, app, then instance number
    (``web/api/2`` before ``web/api/10``, which plain string order puts first)."""
    return sorted(keys, key=order_key)


def select(keys: Iterable[str], target: str) -> list[str]:
    """The keys ``target`` names, in order (empty when none). Raises BadRequest for a
    malformed target."""
    if (why := check_target(target)) is not None:
        raise BadRequest(f"target {target!r}: {why}", {"target": target})
    if not is_glob(target):   # the frequent case, without a pattern match per key
        under = target + "/"
        return in_order(k for k in set(keys) if k == target or k.startswith(under))
    parts = target.split("/")
    return in_order(k for k in set(keys) if _matches(k, parts))


def known_near(keys: Iterable[str], target: str, most: int = 8) -> str:
    """What there is where ``target`` stopped matching, for a NOT_FOUND message:
    ``; stack demo has apps notifier, web, worker`` (``target`` ``demo/nope``),
    ``; demo/web has instance 0`` (``demo/web/7``), ``; the stacks are demo, shop``
    (``demox``); "" for a glob or when there is nothing to name."""
    if is_glob(target):
        return ""
    parts = target.split("/")
    split = [k.split("/") for k in set(keys)]
    for depth in range(len(parts) - 1, -1, -1):   # the deepest prefix that exists
        names = {k[depth] for k in split if k[:depth] == parts[:depth] and len(k) > depth}
        if not names:
            continue
        ordered = sorted(names, key=_natural)
        shown = ", ".join(ordered[:most]) + (f" and {len(ordered) - most} more"
                                             if len(ordered) > most else "")
        what = ("stacks", "apps", "instances")[depth]
        if len(ordered) == 1:
            what = what[:-1]
        if depth == 0:
            return f"; the {what} {'is' if len(ordered) == 1 else 'are'} {shown}"
        return f"; {'stack ' if depth == 1 else ''}{'/'.join(parts[:depth])} has {what} {shown}"
    return ""


def _natural(name: str) -> list[Any]:
    """``a2`` before ``a10``: digits compared as numbers."""
    import re  # only for a NOT_FOUND message
    return [int(t) if t.isascii() and t.isdigit() else t
            for t in re.split(r"([0-9]+)", name)]


def select_all(keys: Iterable[str], targets: list[str]) -> list[str]:
    """The keys any of ``targets`` names, in order. Raises NotFound naming every target
    that names nothing, BadRequest for a malformed one."""
    known = set(keys)
    out: set[str] = set()
    missing = []
    for t in targets:
        found = select(known, t)
        if not found:
            missing.append(t)
        out.update(found)
    if missing:
        names = ", ".join(repr(t) for t in missing)
        raise NotFound(f"no stack, app or instance matches {names}"
                       f"{known_near(known, missing[0]) if len(missing) == 1 else ''}",
                       {"targets": missing})
    return in_order(out)


def sources(keys: Iterable[str], target: str) -> list[Source]:
    """The journal sources ``target`` names among instance ``keys``, as coarse as the
    target: ``web`` is one source (the whole stack), ``web/a*`` one per app, and
    ``web/api/0`` one instance. A last part that is ``*`` alone names all of its
    parent: ``web/*`` is the stack and ``web/api/*`` the app, as the journal has them
    (a job's output and the lines of removed apps or instances included)."""
    parts = target.split("/")
    if len(parts) > 1 and parts[-1] == "*":
        target = "/".join(parts[:-1])
    depth = len(target.split("/"))
    out: set[Source] = set()
    for key in select(keys, target):
        stack, app, index = key.split("/")
        out.add((stack, app if depth > 1 else None, int(index) if depth > 2 else None))
    return sorted(out, key=lambda s: (s[0], s[1] or "", -1 if s[2] is None else s[2]))


def source_target(source: Source) -> str:
    """The target without globs that names exactly ``source`` (exact_source's inverse)."""
    return "/".join(str(part) for part in source if part is not None)


def journal_target(target: str) -> str | None:
    """The target without globs whose lines the journal may hold although no instance
    is known: ``target`` itself, or its parent for a last part that is ``*`` alone
    (``web/*`` reads the whole stack, as :func:`sources` has it); None for any other
    glob, which matches only the instances tenure knows."""
    parts = target.split("/")
    if len(parts) > 1 and parts[-1] == "*":
        target = "/".join(parts[:-1])
    return None if is_glob(target) else target


def exact_source(target: str) -> Source:
    """The one source a target without globs names (it may be known only to the
    journal: an app removed from the config keeps its lines)."""
    parts = target.split("/")
    return (parts[0], parts[1] if len(parts) > 1 else None,
            int(parts[2]) if len(parts) > 2 else None)
