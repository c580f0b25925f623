"""The backend API's request schemas where a value reaches a timer or SQLite: bounded,
so that a bad request is BAD_REQUEST and never an error of the layer below."""

from __future__ import annotations

import pytest

from backend import api
from protocol.errors import BadRequest


@pytest.mark.parametrize("schema", ["S_STACK_STOP", "S_DRAIN"])
def test_a_stop_or_drain_timeout_is_bounded_as_a_targets_is(schema):
    """A negative or a huge timeout passed the schema: any finite float was taken."""
    params = {"stack": "s"} if schema == "S_STACK_STOP" else {}
    for timeout in (-1.0, 1e300):
        with pytest.raises(BadRequest, match="timeout must be"):
            getattr(api, schema).validate({**params, "timeout": timeout})
    assert getattr(api, schema).validate({**params, "timeout": 5})["timeout"] == 5.0
