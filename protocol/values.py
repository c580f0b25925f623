"""A small base for value objects on the command line's import path.

``dataclasses`` pulls in ``inspect`` and costs a CLI call about as much as everything
else it imports; these few classes only need equality, a repr and ``replace``.
Instances are treated as immutable by convention: nothing assigns to them after
``__init__``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Self

__all__ = ["Value"]


class Value:
    __slots__: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, k) for k in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._values() == other._values()  # type: ignore[attr-defined,unused-ignore]

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._values()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"{type(self).__name__}({inner})"

    def replace(self, **changes: Any) -> Self:
        values = {k: getattr(self, k) for k in self.__slots__}
        values.update(changes)
        return type(self)(**values)
