"""An INI reader with the rules supervisord gets from Python's ``RawConfigParser`` (as
supervisord configures it: ``inline_comment_prefixes=(';', '#')``, ``strict=False``), that
also remembers the file and line of every section and option.

The rules, as ``configparser`` applies them:

- a line whose first non-blank character is ``#`` or ``;`` is a comment; elsewhere ``;``
  or ``#`` starts a comment only at the start of the line or after whitespace
  (``url=http://x/#frag`` keeps its ``#``);
- ``[name]`` starts a section (everything up to the last ``]``); ``[DEFAULT]`` holds
  values every section inherits; any other line that starts with ``[`` is an error (a
  malformed header, which configparser would misread as a key or as a key outside any
  section);
- ``key = value`` or ``key: value`` (the first ``=`` or ``:``); keys are lower-cased and
  stripped, values stripped;
- a line indented deeper than its option's first line continues the value (joined with
  newlines); blank lines inside a continued value are kept, trailing ones dropped;
- a section or option given twice is merged, the later value wins (also across files).

A leading UTF-8 byte order mark, which some Windows editors write, is skipped.

There is no interpolation here: supervisord expands ``%(name)s`` itself, later.
"""

from __future__ import annotations

import re

from msgspec import Struct, field

__all__ = ["IniDocument", "IniError", "IniSection", "IniValue"]

DEFAULT_SECTION = "DEFAULT"
_SECTION = re.compile(r"\[(?P<header>.+)\]")
_OPTION = re.compile(r"(?P<option>.*?)\s*(?P<vi>[=:])\s*(?P<value>.*)$")
_COMMENT_PREFIXES = ("#", ";")


class IniError(Exception):
    """A line that is neither a comment, a section header, an option nor a continuation."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem


class IniValue(Struct, frozen=True):
    value: str
    file: str
    line: int


class IniSection(Struct):
    name: str
    file: str
    line: int
    options: dict[str, IniValue] = field(default_factory=dict)


class _Pending(Struct):
    """The option whose value is still being read (it may continue on later lines)."""

    section: IniSection
    key: str
    file: str
    line: int
    lines: list[str]


class IniDocument:
    """Sections in the order they first appeared, merged over every :meth:`read`."""

    def __init__(self) -> None:
        self.sections: dict[str, IniSection] = {}
        self.defaults = IniSection(DEFAULT_SECTION, "", 0)

    def get(self, section: str, key: str) -> IniValue | None:
        """The value of ``key`` in ``section`` or inherited from ``[DEFAULT]``."""
        own = self.sections[section].options.get(key)
        return own if own is not None else self.defaults.options.get(key)

    def keys(self, section: str) -> list[str]:
        """The section's keys and the inherited ones, in order of appearance."""
        own = list(self.sections[section].options)
        return own + [k for k in self.defaults.options if k not in own]

    def read(self, text: str, file: str) -> None:
        """Parse ``text`` (from ``file``) into this document. Raises IniError for the first
        line that cannot be parsed."""
        current: IniSection | None = None
        pending: _Pending | None = None
        indent = 0
        text = text.removeprefix("\ufeff")
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        for lineno, raw in enumerate(lines, start=1):
            content, had_comment = _strip_comment(raw)
            if not content:
                if pending is not None and not had_comment:
                    pending.lines.append("")
                continue
            depth = len(raw) - len(raw.lstrip())
            if pending is not None and depth > indent:
                pending.lines.append(content)
                continue
            self._finish(pending)
            pending, indent = None, depth
            header = _SECTION.match(content)
            if header:
                current = self._section(header.group("header"), file, lineno)
                continue
            if content.startswith("["):
                raise IniError(lineno, f"a malformed section header: {content!r} (a "
                               "header is '[name]')")
            if current is None:
                raise IniError(lineno, "a key outside any [section]")
            pending = _option(current, content, file, lineno)
        self._finish(pending)

    def _section(self, name: str, file: str, line: int) -> IniSection:
        if name == DEFAULT_SECTION:
            if not self.defaults.file:
                self.defaults = IniSection(name, file, line, self.defaults.options)
            return self.defaults
        if name not in self.sections:
            self.sections[name] = IniSection(name, file, line)
        return self.sections[name]

    def _finish(self, pending: _Pending | None) -> None:
        if pending is not None:
            value = "\n".join(pending.lines).rstrip()
            pending.section.options[pending.key] = IniValue(value, pending.file,
                                                            pending.line)


def _option(section: IniSection, content: str, file: str, line: int) -> _Pending:
    m = _OPTION.match(content)
    if m is None or not m.group("option").strip():
        raise IniError(line, f"not a 'key = value' line: {content!r}")
    key = m.group("option").rstrip().lower()
    return _Pending(section, key, file, line, [m.group("value").strip()])


def _strip_comment(line: str) -> tuple[str, bool]:
    """The line without its comment, stripped, and whether it had a comment."""
    if line.strip().startswith(_COMMENT_PREFIXES):
        return "", True
    cut = len(line)
    for prefix in _COMMENT_PREFIXES:
        i = line.find(prefix)
        while i > 0 and not line[i - 1].isspace():
            i = line.find(prefix, i + 1)
        if i >= 0:
            cut = min(cut, i)
    return line[:cut].strip(), cut < len(line)
