"""protocol.durable.read_json, the reader under every versioned JSON record: whatever a
file holds, it returns a record of the asked kind and format or raises STATE_CORRUPT
(never RecursionError, never a format that only compares equal to a known one)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.durable import atomic_write, json_map, read_json
from protocol.errors import StateCorrupt

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70)
                    | st.floats(allow_nan=True) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)


def _file(tmp_path: Path, data: bytes) -> Path:
    os.chmod(tmp_path, 0o700)
    path = tmp_path / "r.json"
    atomic_write(path, data)
    return path


def test_a_record_nested_too_deeply_is_state_corrupt(tmp_path: Path) -> None:
    with pytest.raises(StateCorrupt, match="nested too deeply"):
        read_json(_file(tmp_path, b"[" * 200_000), "k")


@pytest.mark.parametrize("version", [True, 1.0, "1", [1]])
def test_a_format_that_only_equals_a_known_one_is_refused(tmp_path: Path,
                                                          version: Any) -> None:
    path = _file(tmp_path, json.dumps({"kind": "k", "format": version}).encode())
    with pytest.raises(StateCorrupt, match="has format"):
        read_json(path, "k")


def test_a_known_format_reads(tmp_path: Path) -> None:
    path = _file(tmp_path, json.dumps({"kind": "k", "format": 2, "x": 1}).encode())
    assert read_json(path, "k", formats=(1, 2)) == {"kind": "k", "format": 2, "x": 1}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(st.binary(max_size=64), JSON.map(lambda v: json.dumps(v).encode()),
                      st.fixed_dictionaries({"kind": st.just("k") | JSON},
                                            optional={"format": st.sampled_from(
                                                [1, True, 1.0, 2]) | JSON, "x": JSON})
                      .map(lambda d: json.dumps(d).encode())))
def test_whatever_the_file_holds_it_is_a_record_or_state_corrupt(tmp_path: Path,
                                                                 body: bytes) -> None:
    try:
        got = read_json(_file(tmp_path, body), "k")
    except StateCorrupt:
        return
    assert got["kind"] == "k" and type(got["format"]) is int and got["format"] == 1


@pytest.mark.parametrize("text, value", [
    ('{"a": 1}', {"a": 1}), (b'{"a": 1}', {"a": 1}), ("[1]", None), ("7", None),
    ("null", None), ("{", None), (b"\xff", None), ("[" * 100_000, None), (5, None),
    (None, None)])
def test_json_map_is_the_object_a_stored_value_holds_or_none(text: Any,
                                                            value: Any) -> None:
    assert json_map(text) == value
