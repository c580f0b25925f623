"""Hypothesis against a live owner: malformed parameters to every method get BAD_REQUEST
and change nothing (epoch, launches, intents, processes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from owner.testing import GuardianKey, OwnerProcess
from protocol.client import Client
from protocol.errors import BadRequest

VALID: dict[str, dict[str, Any]] = {
    "launch": {"launch_key": "f1", "stack": "s", "app": "a", "instance": 0, "generation": 1,
               "argv": ["sleep", "1000"], "env": {}, "stop": {"signal": "TERM"}},
    "stop": {"launch_key": "f1", "policy": {"signal": "TERM", "timeout": 1}},
    "signal": {"launch_key": "f1", "signal": "HUP"},
    "stack.set_intent": {"stack": "s", "intent": "stopped", "expected_revision": 0},
    "observations.ack": {"cursor": 0},
    "logs.read": {"after": 0, "limit": 10},
    "logs.forget": {"sources": [{"stack": "s", "app": "a", "instance": 0}]},
    "logs.forget_apps": {"apps": [{"stack": "s", "app": "a"}]},
    "logs.note": {"stack": "s", "app": "a", "instance": 0, "generation": 1, "text": "t"},
    "observations.read": {"after": 0, "limit": 10},
    "inventory": {"stack": "s"},
    "inspect": {"launch_key": "f1"},
    "fence": {"grant": {}},
    "guardian.pin": {"public_key": "ed25519:AAAA"},
}

wrong = st.one_of(st.booleans(), st.floats(allow_nan=True), st.binary(max_size=5),
                  st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3),
                                                                       st.integers(), max_size=2),
                  st.integers(-(2**63), -1), st.just(""), st.just("a/b"), st.just("x\x00"))


@st.composite
def corrupted(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    method = draw(st.sampled_from(sorted(VALID)))
    params = dict(VALID[method])
    field = draw(st.sampled_from(sorted(params)))
    value = draw(wrong)
    if isinstance(value, type(params[field])) and not isinstance(value, bool) \
            and not isinstance(params[field], bool):
        value = draw(st.booleans())  # a value of the right type might be valid: use bool
    params[field] = value
    return method, params


@pytest.fixture
def fuzz_owner(short_home: Path) -> Iterator[tuple[OwnerProcess, int, dict[str, Any]]]:
    """One owner for all examples (function scope: Hypothesis runs them in one call)."""
    owner = OwnerProcess(short_home).start()
    gk = GuardianKey()
    with owner.client() as c:
        epoch = gk.bootstrap(c, owner.instance)
    assert gk.signed is not None
    yield owner, epoch, gk.signed
    assert owner.stop() == 0


def snapshot(c: Client, pid: int) -> Any:
    return (c.call("status")["epoch"], c.call("inventory")["launches"],
            c.call("stack.intents")["intents"],
            sorted(p.pid for p in psutil.Process(pid).children()))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corrupted())
def test_malformed_params_are_bad_request_and_change_nothing(fuzz_owner, case):
    owner, epoch, grant = fuzz_owner
    method, params = case
    with owner.client(grant=grant) as c:
        before = snapshot(c, owner.proc.pid)
        with pytest.raises(BadRequest):
            c.call(method, params, epoch=epoch)
        assert snapshot(c, owner.proc.pid) == before
