"""What every importer produces: draft apps, findings, and the errors they raise.

A :class:`Draft` is an app as read from one source file, before it has its final name and
stack (names are sanitised and made unique, and start order is turned into ``after``, by
:mod:`backend.importers.assemble`). A :class:`Finding` is something the importer could not
carry over (``not_mapped``) or carried over with a caveat the reader must check (``note``).
Pure data; nothing here reads files.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

from msgspec import Struct, field

from protocol.errors import ConfigInvalid

from ..model import App

__all__ = ["Context", "Draft", "Finding", "FindingKind", "Origin", "SourceResult", "read_utf8",
           "source_error"]

NodeRunner = Callable[[str, str, float], str]
"""Runs ``node -e SCRIPT FILE FD`` (file, script, timeout in seconds) and returns what the
script wrote to FD (the JSON; stdout is the file's own)."""


class FindingKind(StrEnum):
    NOT_MAPPED = "not_mapped"  # the setting has no tenure equivalent and was left out
    NOTE = "note"              # carried over, but check it (a value fixed at import time)


class Origin(Struct, frozen=True):
    """Where a setting was read: ``key`` names it in the source's own terms
    (``[program:web] user``, ``apps[0].watch``, ``web``); ``line`` is 1-based or None."""

    file: str
    line: int | None
    key: str


class Finding(Struct, frozen=True):
    kind: FindingKind
    origin: Origin
    problem: str

    def sort_key(self) -> tuple[str, int, str, str]:
        o = self.origin
        return (o.file, -1 if o.line is None else o.line, o.key, self.problem)

    def to_wire(self) -> dict[str, Any]:
        o = self.origin
        return {"file": o.file, "line": o.line, "key": o.key, "problem": self.problem}

    def __str__(self) -> str:
        o = self.origin
        where = o.file if o.line is None else f"{o.file}:{o.line}"
        return f"{where}: {o.key}: {self.problem}" if o.key else f"{where}: {self.problem}"


class Draft(Struct, frozen=True):
    """One app as read from a source. ``app.name`` is the source's own name (maybe not a
    valid tenure name yet); ``app.stack`` is the source's group, or "" for the stack given
    with ``--stack``. Apps of one stack start in ``priority`` order, lowest first; an app
    whose source has no start order (PM2, Procfile) has None and takes no part in it."""

    app: App
    origin: Origin
    priority: int | None = None


class SourceResult(Struct):
    drafts: list[Draft] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def not_mapped(self, origin: Origin, problem: str) -> None:
        self.findings.append(Finding(FindingKind.NOT_MAPPED, origin, problem))

    def note(self, origin: Origin, problem: str) -> None:
        self.findings.append(Finding(FindingKind.NOTE, origin, problem))

    def extend(self, other: SourceResult) -> None:
        self.drafts.extend(other.drafts)
        self.findings.extend(other.findings)


class Context(Struct, frozen=True):
    """What an import may depend on besides the files, injected so tests are exact:
    the environment and host name supervisord would expand (``%(ENV_X)s``,
    ``%(host_node_name)s``), and how a PM2 ``.config.js`` is evaluated."""

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    hostname: str = field(default_factory=platform.node)
    run_node: NodeRunner | None = None
    node_timeout: float = 10.0


def source_error(file: str, line: int | None, key: str, problem: str) -> ConfigInvalid:
    """The error for a source file that cannot be read or parsed at all: CONFIG_INVALID
    with the same ``data`` shape as a tenure.toml error (``file, key, line, problem``)."""
    where = file if line is None else f"{file}:{line}"
    what = f"{key}: {problem}" if key else problem
    return ConfigInvalid(f"{where}: {what}",
                         {"file": file, "key": key, "line": line, "problem": problem})


def read_utf8(path: str, *, bom: bool = True) -> str:
    """The text of source file ``path``; with ``bom``, a leading UTF-8 byte order mark
    (some Windows editors write one) is skipped. Raises ConfigInvalid: the file cannot
    be read, or is not UTF-8 (naming the line of the first byte that is not)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise source_error(path, None, "", f"cannot read the file: {e.strerror or e}") \
            from None
    try:
        return raw.decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as e:
        raise source_error(path, raw[:e.start].count(b"\n") + 1, "",
                           "the file is not valid UTF-8") from None
