"""A :class:`backend.model.Config` → tenure.toml text.

Deterministic: stacks and apps sorted by name, keys in a fixed order, ``env`` sorted, and
a value equal to tenure's default left out (the parser fills it in again, so the config
revision is the same). Tables other than ``env`` are written inline; ``env`` gets its own
sub-table, last. Strings are TOML basic strings with every character TOML forbids
escaped, so the text always parses back to the same model
(:func:`backend.config.parse_config`; tested for arbitrary strings).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from ..model import App, Backoff, Config, Health, Readiness, RunAs, StartLimit, StopSpec
from .model import Origin

__all__ = ["render_toml", "toml_string"]

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}
_DEFAULT_APP = App(name="", stack="", command=("",))
_EXACT_FLOAT_LIMIT = 2.0 ** 53


def render_toml(config: Config, origins: Mapping[str, Origin],
                header: Sequence[str] = ()) -> str:
    """The text of ``config``; each app is preceded by a comment naming its ``origins``
    entry (``stack/app`` → where it was read). Never raises for a config whose strings are
    valid Unicode."""
    lines = [f"# {h}".rstrip() for h in header]
    for stack in sorted(config.stacks):
        for name, app in sorted(config.stacks[stack].apps.items()):
            if lines:
                lines.append("")
            origin = origins.get(f"{stack}/{name}")
            if origin is not None:
                lines.append(_comment(origin))
            path = ("stacks", stack, "apps", name)
            lines.append(f"[{_dotted(path)}]")
            lines.extend(_app_lines(app))
            if app.env:
                lines.extend(["", f"[{_dotted((*path, 'env'))}]"])
                lines.extend(f"{_key(k)} = {toml_string(v)}" for k, v in sorted(app.env.items()))
    return "\n".join(lines) + "\n"


def _comment(origin: Origin) -> str:
    where = origin.file if origin.line is None else f"{origin.file}:{origin.line}"
    text = f"from {where} {origin.key}".rstrip()
    return "# " + "".join(c if c.isprintable() else "?" for c in text)


def _app_lines(app: App) -> list[str]:
    d = _DEFAULT_APP
    out = [f"command = {_value(app.command)}"]
    if app.cwd != d.cwd:
        out.append(f"cwd = {_value(app.cwd)}")
    if app.instances != d.instances:
        out.append(f"instances = {_value(app.instances)}")
    if app.restart != d.restart:
        out.append(f"restart = {_value(app.restart)}")
    if app.after:
        out.append(f"after = {_value(sorted(app.after))}")
    out.extend(_run_as_lines(app.run_as))
    if app.log_retention is not None:
        n = app.log_retention
        out.append("log_retention = " + (_value(f"{n >> 20}MiB") if n % (1 << 20) == 0
                                         else _value(n)))
    tables: list[tuple[str, Any, Any]] = [
        ("ready", app.ready, Readiness()), ("backoff", app.backoff, Backoff()),
        ("start_limit", app.start_limit, StartLimit()), ("stop", app.stop, StopSpec())]
    if app.health is not None:
        tables.append(("health", app.health, Health(kind=app.health.kind)))
    for key, value, default in tables:
        fields = _changed(value, default)
        if fields:
            out.append(f"{key} = {_inline(fields)}")
    return out


def _run_as_lines(ra: RunAs) -> list[str]:
    """``user``, ``group``, ``supplementary_groups`` and ``umask`` (as ``"0022"``), those
    that are set."""
    out = [f"{key} = {_value(getattr(ra, key))}" for key in ("user", "group")
           if getattr(ra, key) is not None]
    if ra.supplementary_groups:
        out.append(f"supplementary_groups = {_value(ra.supplementary_groups)}")
    if ra.umask is not None:
        out.append(f"umask = {_value(f'{ra.umask:04o}')}")
    return out


def _changed(value: Any, default: Any) -> dict[str, Any]:
    """The fields of the struct ``value`` that differ from ``default``; a ``kind``
    field is always kept when anything is written, so the table names its kind."""
    fields = {n: getattr(value, n) for n in value.__struct_fields__
              if getattr(value, n) != getattr(default, n)}
    if fields and hasattr(value, "kind"):
        fields = {"kind": value.kind, **fields}
    return fields


def _inline(fields: Mapping[str, Any]) -> str:
    return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in fields.items()) + " }"


def _value(value: Any) -> str:
    if isinstance(value, Enum):
        return toml_string(str(value.value))
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        exact = value.is_integer() and abs(value) < _EXACT_FLOAT_LIMIT
        return str(int(value)) if exact else repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string: quotes, backslashes and every control character
    are escaped (TOML forbids all of them but tab, escaped here for readability)."""
    out = []
    for c in text:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _key(key: str) -> str:
    return key if _BARE.fullmatch(key) else toml_string(key)


def _dotted(path: Sequence[str]) -> str:
    return ".".join(_key(part) for part in path)
