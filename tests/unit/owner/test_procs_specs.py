"""Wire decoding of stop policies and launch specs: strict, and fuzzed."""

from __future__ import annotations

import contextlib
import math
import os
import signal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from owner.procinfo import parse_stat
from owner.specs import ExitStatus, LaunchSpec, StopPolicy, parse_signal
from protocol.errors import BadRequest


@pytest.mark.parametrize("value", ["TERM", "SIGTERM", 15])
def test_signal_spellings_all_mean_sigterm(value: object) -> None:
    assert parse_signal(value) == signal.SIGTERM


@pytest.mark.parametrize("value", ["term", "SIGNOPE", "", 0, -1, 10_000, True, 1.5, None])
def test_bad_signals_are_bad_requests(value: object) -> None:
    with pytest.raises(BadRequest):
        parse_signal(value)


def test_stop_policy_defaults_and_round_trip() -> None:
    assert StopPolicy.from_wire({}) == StopPolicy(signal.SIGTERM, 10.0, 5.0)
    p = StopPolicy.from_wire({"signal": "INT", "timeout": 2, "kill_after": 0.5, "x": 1})
    assert p == StopPolicy(signal.SIGINT, 2.0, 0.5)
    assert StopPolicy.from_wire(p.to_wire()) == p
    assert p.to_wire()["signal"] == "SIGINT"


def test_a_real_time_stop_signal_round_trips_by_its_number() -> None:
    """Python names no SIGRTMIN+N: to_wire raised ValueError, and every launch with
    one answered INTERNAL."""
    rt = signal.SIGRTMIN + 6
    p = StopPolicy.from_wire({"signal": rt})
    assert p.to_wire()["signal"] == rt and StopPolicy.from_wire(p.to_wire()) == p


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "10", True, None, 1e12])
@pytest.mark.parametrize("key", ["timeout", "kill_after"])
def test_bad_durations_are_bad_requests(key: str, bad: object) -> None:
    with pytest.raises(BadRequest, match=key):
        StopPolicy.from_wire({key: bad})


def test_launch_spec_round_trip() -> None:
    wire = {"argv": ["sleep", "1"], "env": {"A": "b"}, "cwd": "/", "stop": {"timeout": 1}}
    spec = LaunchSpec.from_wire(wire)
    assert spec.argv == ("sleep", "1") and dict(spec.env) == {"A": "b"}
    assert spec.stop.timeout == 1.0
    assert LaunchSpec.from_wire(spec.to_wire()) == spec


@pytest.mark.parametrize("wire", [
    {}, {"argv": []}, {"argv": "sleep"}, {"argv": [""]}, {"argv": ["a", 1]},
    {"argv": ["a\0b"]}, {"argv": ["a"], "env": {"A=B": "c"}}, {"argv": ["a"], "env": {"": "c"}},
    {"argv": ["a"], "env": {"A": 1}}, {"argv": ["a"], "env": []}, {"argv": ["a"], "cwd": ""},
    {"argv": ["a"], "cwd": 3}, {"argv": ["a"], "stop": {"signal": "NOPE"}}, [],
])
def test_bad_launch_specs_are_bad_requests(wire: Any) -> None:
    with pytest.raises(BadRequest):
        LaunchSpec.from_wire(wire)


_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_values = st.recursive(_scalars, lambda c: st.lists(c, max_size=3)
                       | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=8)
_stop_keys = st.sampled_from(["signal", "timeout", "kill_after", "other"])
_launch_keys = st.sampled_from(["argv", "env", "cwd", "stop", "other"])


@given(st.dictionaries(_stop_keys, _values | st.sampled_from(["TERM", "SIGKILL", 9, 0.5])))
def test_fuzz_stop_policy_parses_or_raises_bad_request(d: dict[str, Any]) -> None:
    try:
        p = StopPolicy.from_wire(d)
    except BadRequest:
        return
    assert StopPolicy.from_wire(p.to_wire()) == p


@given(st.dictionaries(_launch_keys, _values | st.lists(st.text(max_size=5), max_size=3)))
def test_fuzz_launch_spec_parses_or_raises_bad_request(d: dict[str, Any]) -> None:
    try:
        spec = LaunchSpec.from_wire(d)
    except BadRequest:
        return
    assert LaunchSpec.from_wire(spec.to_wire()) == spec


@given(_values)
def test_fuzz_non_maps_raise_bad_request(v: Any) -> None:
    for decode in (StopPolicy.from_wire, LaunchSpec.from_wire):
        with contextlib.suppress(BadRequest):
            decode(v)


def test_exit_status_from_wait_words() -> None:
    assert ExitStatus.from_wait_status(3 << 8) == ExitStatus(3, None)
    assert ExitStatus.from_wait_status(9) == ExitStatus(None, 9)
    assert ExitStatus.from_wait_status(0x80 | 6) == ExitStatus(None, 6, True)
    assert ExitStatus.from_waitid(os.CLD_EXITED, 0) == ExitStatus(0, None)
    assert ExitStatus.from_waitid(os.CLD_DUMPED, 11) == ExitStatus(None, 11, True)
    assert ExitStatus.from_waitid(os.CLD_KILLED, 9).to_wire() == {
        "exit_code": None, "signal": 9, "core_dumped": False}


def test_stat_parsing_survives_parens_and_spaces_in_comm() -> None:
    fields = ["S", "1", "777", "777"] + ["0"] * 15 + ["4242", "0"]
    line = ("123 (a) b (c) d) " + " ".join(fields)).encode()
    st_ = parse_stat(123, line)
    assert (st_.state, st_.ppid, st_.pgid, st_.start_ticks) == ("S", 1, 777, 4242)
