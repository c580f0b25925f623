"""PEP 508 requirement strings and environment markers, for the dependency closure.

``packaging`` is used when it is importable. tenure does not depend on it, so a sealed
guardian may not have it; the fallback below understands the subset of PEP 508 that
installed metadata uses (names, extras, version specifiers it ignores, markers with
``and``/``or``/parentheses and the PEP 508 comparison operators). Anything it cannot read
raises ValueError: the caller fails closed rather than guess a closure.
"""

from __future__ import annotations

import operator
import os
import platform
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Requirement", "default_environment", "normalize", "parse_requirement"]

_NAME = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[([^\]]*)\])?")
_TOKEN = re.compile(
    r"\s*(?:(?P<str>'[^']*'|\"[^\"]*\")|(?P<op>===|==|!=|<=|>=|~=|<|>|\(|\))"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_.]*))"
)
_VERSION = re.compile(r"\d+(\.\d+)*")
_VERSION_VARS = frozenset(
    {"python_version", "python_full_version", "implementation_version", "platform_release"}
)


def normalize(name: str) -> str:
    """PEP 503 normalised project or extra name. Never raises."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Requirement:
    """A requirement reduced to what the closure needs: name, extras, marker test."""

    name: str
    extras: frozenset[str]
    applies: Callable[[frozenset[str]], bool]


def default_environment() -> dict[str, str]:
    """PEP 508 marker variables for the running interpreter. Never raises."""
    impl = sys.implementation.version
    impl_version = f"{impl.major}.{impl.minor}.{impl.micro}"
    if impl.releaselevel != "final":
        impl_version += impl.releaselevel[0] + str(impl.serial)
    return {
        "os_name": os.name,
        "sys_platform": sys.platform,
        "platform_machine": platform.machine(),
        "platform_python_implementation": platform.python_implementation(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "python_full_version": platform.python_version(),
        "implementation_name": sys.implementation.name,
        "implementation_version": impl_version,
    }


def parse_requirement(text: str, *, use_packaging: bool = True) -> Requirement:
    """Parse one Requires-Dist value. ``applies(extras)`` evaluates its marker with
    ``extra`` set to each requested extra (or "" when none is requested).

    Raises ValueError when the requirement or its marker cannot be read.
    """
    if use_packaging:
        try:
            from packaging.requirements import Requirement as PRequirement
        except ImportError:
            pass
        else:
            return _with_packaging(PRequirement, text)
    return _fallback(text)


def _with_packaging(cls: type, text: str) -> Requirement:
    from packaging.requirements import InvalidRequirement

    try:
        req = cls(text)
    except InvalidRequirement as e:
        raise ValueError(f"bad requirement {text!r}: {e}") from e
    marker = req.marker

    def applies(extras: frozenset[str]) -> bool:
        if marker is None:
            return True
        return any(bool(marker.evaluate({"extra": e})) for e in (extras or {""}))

    return Requirement(normalize(req.name), frozenset(map(normalize, req.extras)), applies)


def _fallback(text: str) -> Requirement:
    m = _NAME.match(text)
    if m is None:
        raise ValueError(f"bad requirement {text!r}")
    rest = text[m.end():]
    if rest.lstrip().startswith("@"):
        marker = rest.split(" ;", 1)[1] if " ;" in rest else ""
    else:
        marker = rest.split(";", 1)[1] if ";" in rest else ""
    extras = frozenset(normalize(e.strip()) for e in (m.group(2) or "").split(",") if e.strip())
    tokens = _tokenize(marker) if marker.strip() else []
    env = default_environment()

    def applies(wanted: frozenset[str]) -> bool:
        if not tokens:
            return True
        return any(_Parser(tokens, {**env, "extra": e}).parse() for e in (wanted or {""}))

    applies(frozenset())  # fail on unreadable markers now, not later
    return Requirement(normalize(m.group(1)), extras, applies)


def _tokenize(text: str) -> list[tuple[str, str]]:
    """[(kind, value)] with kind in str/op/word. Raises ValueError on anything else."""
    out: list[tuple[str, str]] = []
    pos = 0
    while text[pos:].strip():
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"cannot read marker {text!r} at {pos}")
        kind = m.lastgroup or ""
        value = m.group(kind)
        out.append((kind, value[1:-1] if kind == "str" else value))
        pos = m.end()
    return out


_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne,
}


class _Parser:
    """Recursive descent over marker tokens; every read raises ValueError on surprise."""

    def __init__(self, tokens: list[tuple[str, str]], env: dict[str, str]) -> None:
        self.tokens, self.env, self.i = tokens, env, 0

    def parse(self) -> bool:
        value = self._or()
        if self.i != len(self.tokens):
            raise ValueError(f"trailing tokens in marker: {self.tokens[self.i:]}")
        return value

    def _peek(self) -> tuple[str, str]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", "")

    def _next(self) -> tuple[str, str]:
        tok = self._peek()
        if tok[0] == "end":
            raise ValueError("marker ends early")
        self.i += 1
        return tok

    def _or(self) -> bool:
        value = self._and()
        while self._peek() == ("word", "or"):
            self.i += 1
            value = self._and() or value
        return value

    def _and(self) -> bool:
        value = self._atom()
        while self._peek() == ("word", "and"):
            self.i += 1
            value = self._atom() and value
        return value

    def _atom(self) -> bool:
        if self._peek() == ("op", "("):
            self.i += 1
            value = self._or()
            if self._next() != ("op", ")"):
                raise ValueError("unbalanced parenthesis in marker")
            return value
        left = self._value()
        op = self._op()
        right = self._value()
        return _compare(left, op, right)

    def _value(self) -> tuple[str, str]:
        kind, value = self._next()
        if kind == "str":
            return ("", value)
        if kind == "word" and (value in self.env):
            return (value, self.env[value])
        raise ValueError(f"unknown marker value {value!r}")

    def _op(self) -> str:
        kind, value = self._next()
        if kind == "op" and value not in "()":
            return value
        if (kind, value) == ("word", "in"):
            return "in"
        if (kind, value) == ("word", "not") and self._next() == ("word", "in"):
            return "not in"
        raise ValueError(f"unknown marker operator {value!r}")


def _compare(left: tuple[str, str], op: str, right: tuple[str, str]) -> bool:
    """PEP 508 comparison of (variable name or "", value) pairs. Raises ValueError."""
    (lvar, lval), (rvar, rval) = left, right
    if "extra" in (lvar, rvar):
        lval, rval = normalize(lval), normalize(rval)
    if op == "in":
        return lval in rval
    if op == "not in":
        return lval not in rval
    if op == "===":
        return lval == rval
    if (lvar in _VERSION_VARS or rvar in _VERSION_VARS) and _is_version(lval, rval):
        return _version_compare(lval, op, rval)
    if op in ("==", "!="):
        return _CMP[op](lval, rval)
    raise ValueError(f"cannot compare {lval!r} {op} {rval!r}")


def _is_version(*values: str) -> bool:
    return all(_VERSION.fullmatch(v.removesuffix(".*")) for v in values)


def _version_compare(lval: str, op: str, rval: str) -> bool:
    if rval.endswith(".*"):
        prefix = tuple(int(p) for p in rval[:-2].split("."))
        got = tuple(int(p) for p in lval.split("."))[: len(prefix)]
        if op not in ("==", "!="):
            raise ValueError(f"wildcard needs == or !=, not {op}")
        return (got == prefix) == (op == "==")
    a, b = _vtuple(lval), _vtuple(rval)
    if op == "~=":
        parts = rval.split(".")
        if len(parts) < 2:
            raise ValueError(f"~= needs two release segments: {rval!r}")
        upper = _vtuple(".".join(parts[:-1]))
        return a >= b and a[: len(parts) - 1] == upper[: len(parts) - 1]
    return _CMP[op](a, b)


def _vtuple(v: str) -> tuple[int, ...]:
    parts = [int(p) for p in v.split(".")]
    while len(parts) < 4:
        parts.append(0)
    return tuple(parts)
