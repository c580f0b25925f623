"""protocol.schema: what a field accepts, through Schema.validate's fast path and its
full one alike."""

from __future__ import annotations

import enum
import itertools
from typing import Any

import pytest

from protocol.errors import BadRequest
from protocol.schema import Field, Schema


class Level(enum.IntEnum):
    LOW = 1


class Name(str):
    pass


TYPES: list[Any] = [str, int, float, bool, (int, float), (bool, int), (str, int), dict, list,
                    bytes, (float,)]
VALUES: list[Any] = ["s", Name("n"), 0, 7, -3, True, False, 1.5, float("nan"), float("inf"),
                     Level.LOW, {}, {"a": 1}, [], [1], b"x"]


def validates(types: Any, value: Any) -> bool:
    try:
        Schema(Field("x", types)).validate({"x": value})
    except BadRequest:
        return False
    return True


@pytest.mark.parametrize(("types", "value"), list(itertools.product(TYPES, VALUES)))
def test_validate_takes_exactly_what_the_field_accepts(types: Any, value: Any) -> None:
    assert validates(types, value) == Field("x", types).accepts(value)


@pytest.mark.parametrize(("types", "value", "ok"), [
    (int, True, False),            # a bool is never an int
    ((bool, int), True, True),
    (float, 3, True),              # an integral number is a fine float
    (float, float("nan"), False),  # but not a float that is no number
    (int, 1.0, False),
    (str, Name("n"), True),        # subclasses still pass, by the full path
    (int, Level.LOW, True),
])
def test_the_rules_that_matter(types: Any, value: Any, ok: bool) -> None:
    assert validates(types, value) is ok


def test_an_int_for_a_float_comes_out_a_float_and_defaults_fill_in() -> None:
    schema = Schema(Field("f", float), Field("o", str, required=False, default="d"))
    out = schema.validate({"f": 3, "o": None, "extra": 1})
    assert out == {"f": 3.0, "o": "d"} and type(out["f"]) is float


def test_a_missing_or_mistyped_field_is_named() -> None:
    schema = Schema(Field("n", int))
    with pytest.raises(BadRequest, match=r"params\.n is required"):
        schema.validate({})
    with pytest.raises(BadRequest, match=r"params\.n has type bool, expected int"):
        schema.validate({"n": True})


def test_an_integer_past_a_floats_range_is_refused_as_out_of_range_not_raised() -> None:
    """JSON records (backend.db, checkpoints) can hold 10**400; float() of it overflows,
    and so did a check comparing it as a float."""
    schema = Schema(Field("at", float, check=lambda v: None if v >= 0 else "negative"),
                    Field("n", int))
    with pytest.raises(BadRequest, match="out of range") as err:
        schema.validate({"at": 10**400, "n": 1})
    assert err.value.data == {"field": "at"}
    assert schema.validate({"at": 2**63, "n": 10**400}) == {"at": float(2**63), "n": 10**400}
