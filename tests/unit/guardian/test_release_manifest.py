"""RUNTIME.json: canonical form, id, strict parsing (fails closed), fuzzing; markers; argv."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guardian.manifest import (
    DEFAULT_CONTRACTS,
    Interpreter,
    Runtime,
    canonical_json,
    directories,
    is_safe_relpath,
    parse_runtime,
    release_id,
)
from guardian.markers import parse_requirement
from guardian.release import Release, command
from protocol.errors import BadRequest, StateCorrupt

H = "a" * 64


def valid() -> dict[str, Any]:
    return {
        "format": 1,
        "tenure_version": "0.1.0",
        "source_commit": None,
        "interpreter": {"path": "/usr/bin/python3.11", "version": "3.11.7", "sha256": H},
        "files": {"lib/protocol/__init__.py": "b" * 64, "lib/msgpack/__init__.py": "c" * 64},
        "contracts": dict(DEFAULT_CONTRACTS),
    }


def test_canonical_json_is_sorted_compact_and_utf8() -> None:
    assert canonical_json({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'.encode()
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_release_id_is_sha256_of_the_canonical_bytes() -> None:
    data = canonical_json(valid())
    assert release_id(data) == hashlib.sha256(data).hexdigest()
    other = valid()
    other["contracts"]["notify"] = 2
    assert release_id(canonical_json(other)) != release_id(data)


def test_runtime_round_trips() -> None:
    rt = parse_runtime(canonical_json(valid()))
    assert rt.interpreter == Interpreter("/usr/bin/python3.11", "3.11.7", H)
    assert rt.source_commit is None and rt.tenure_version == "0.1.0"
    assert rt.encode() == canonical_json(valid())
    again = Runtime(rt.tenure_version, "f" * 40, rt.interpreter, rt.files, rt.contracts)
    assert parse_runtime(again.encode()).source_commit == "f" * 40


def test_unknown_keys_are_ignored_but_covered_by_the_id() -> None:
    obj = valid()
    obj["built_by"] = "someone"
    rt = parse_runtime(canonical_json(obj))
    assert rt.tenure_version == "0.1.0"
    assert release_id(canonical_json(obj)) != release_id(canonical_json(valid()))


@pytest.mark.parametrize("fmt", [2, 0, "1", 1.0, True, None])
def test_unknown_or_mistyped_format_is_refused(fmt: Any) -> None:
    obj = valid()
    obj["format"] = fmt
    with pytest.raises(StateCorrupt) as ei:
        parse_runtime(canonical_json(obj))
    assert ei.value.data["field"] == "format"


@pytest.mark.parametrize("key", ["format", "tenure_version", "source_commit", "interpreter",
                                 "files", "contracts"])
def test_missing_required_field_is_refused(key: str) -> None:
    obj = valid()
    del obj[key]
    with pytest.raises(StateCorrupt) as ei:
        parse_runtime(canonical_json(obj))
    assert ei.value.data["field"] == key


@pytest.mark.parametrize(("path", "value"), [
    (("tenure_version",), ""),
    (("tenure_version",), 1),
    (("source_commit",), "HEAD"),
    (("source_commit",), 12),
    (("interpreter",), "/usr/bin/python3"),
    (("interpreter", "path"), "python3"),
    (("interpreter", "sha256"), "A" * 64),
    (("interpreter", "version"), None),
    (("files",), {}),
    (("files",), ["lib/x.py"]),
    (("files", "lib/protocol/__init__.py"), "zz"),
    (("contracts",), None),
    (("contracts", "notify"), 0),
    (("contracts", "notify"), True),
    (("contracts", "notify"), "1"),
])
def test_mistyped_field_is_refused(path: tuple[str, ...], value: Any) -> None:
    obj = valid()
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(StateCorrupt):
        parse_runtime(canonical_json(obj))


@pytest.mark.parametrize("rel", ["lib/../etc/passwd", "/lib/x", "lib//x", "lib/./x", "x.py",
                                 "lib/a\\b", "lib/", "lib/protocol/__init__.py/x"])
def test_unsafe_or_misplaced_file_paths_are_refused(rel: str) -> None:
    obj = valid()
    obj["files"][rel] = H
    with pytest.raises(StateCorrupt):
        parse_runtime(canonical_json(obj))


@pytest.mark.parametrize("mangle", [
    lambda b: b + b"\n",
    lambda b: json.dumps(json.loads(b), indent=1).encode(),
    lambda b: json.dumps(dict(reversed(json.loads(b).items())), separators=(",", ":")).encode(),
    lambda b: b.replace(b"{", b'{"format":1,', 1),  # duplicate key
    lambda b: b.replace(b'"0.1.0"', b'"\\u0030.1.0"'),  # same value, other escape
    lambda b: b"\xff" + b,
    lambda b: b"[]",
    lambda b: b"",
])
def test_non_canonical_or_non_json_bytes_are_refused(mangle: Any) -> None:
    with pytest.raises(StateCorrupt):
        parse_runtime(mangle(canonical_json(valid())))


def test_directories_are_every_parent_once() -> None:
    files = ["lib/a/b/c.py", "lib/a/b/d.py", "lib/a/e.py", "lib/f.py", "top"]
    assert directories(files) == {"lib", "lib/a", "lib/a/b"}
    assert directories([]) == frozenset()


def test_a_path_both_file_and_directory_is_refused() -> None:
    doc = valid()
    doc["files"] = {"lib/a": H, "lib/a/b.py": H}
    with pytest.raises(StateCorrupt, match="both a file and a directory"):
        parse_runtime(canonical_json(doc))


def test_safe_relpath() -> None:
    assert is_safe_relpath("lib/a/b.py")
    for bad in ["", "/a", "a/../b", "a//b", "./a", "a/", "a\0b", 3]:
        assert not is_safe_relpath(bad)


# --- fuzz: the reader either parses or raises StateCorrupt, never anything else ----------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _parse_or_corrupt(data: bytes) -> None:
    try:
        parse_runtime(data)
    except StateCorrupt:
        pass


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_fuzz_arbitrary_json(value: Any) -> None:
    try:
        data = canonical_json(value)
    except (ValueError, UnicodeEncodeError):
        return
    _parse_or_corrupt(data)
    _parse_or_corrupt(json.dumps(value).encode())


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    _parse_or_corrupt(data)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["format", "tenure_version", "source_commit", "interpreter", "files",
                        "contracts", "extra"]),
       st.sampled_from([None, "path", "version", "sha256", "lib/x.py", "notify"]),
       json_values)
def test_fuzz_one_field_of_a_valid_manifest(key: str, sub: str | None, value: Any) -> None:
    obj = copy.deepcopy(valid())
    if sub is not None and isinstance(obj.get(key), dict):
        obj[key][sub] = value
    else:
        obj[key] = value
    try:
        data = canonical_json(obj)
    except (ValueError, UnicodeEncodeError):
        return
    _parse_or_corrupt(data)


# --- requirement markers: the fallback agrees with packaging ------------------------------

REQUIREMENTS = [
    "cffi>=2.0.0 ; platform_python_implementation != 'PyPy'",
    "typing-extensions>=4.13.2 ; python_full_version < '3.11'",
    "bcrypt>=3.1.5 ; extra == 'ssh'",
    'pycparser; implementation_name != "PyPy"',
    'win_inet_pton; platform_system == "Windows"',
    'colorama ; (os_name == "nt") and extra == \'dev\'',
    'pywin32 ; (os_name == "nt" and implementation_name != "pypy") and extra == \'test\'',
    "foo[bar,baz]>=1; python_version >= '3.8' or sys_platform == 'win32'",
    "foo ; python_version ~= '3.10'",
    "foo ; python_version == '3.*'",
    "foo ; python_version != '3.11.*'",
    "foo ; 'linux' in sys_platform",
    "foo ; 'win' not in sys_platform and extra == 'Dev_Tools'",
    "foo @ https://example.org/foo.whl ; os_name == 'posix'",
    "plain",
]


@pytest.mark.parametrize("text", REQUIREMENTS)
@pytest.mark.parametrize("extras", [frozenset(), frozenset({"dev"}), frozenset({"ssh"}),
                                    frozenset({"dev-tools"})])
def test_marker_fallback_agrees_with_packaging(text: str, extras: frozenset[str]) -> None:
    a = parse_requirement(text)
    b = parse_requirement(text, use_packaging=False)
    assert (a.name, a.extras) == (b.name, b.extras)
    assert a.applies(extras) == b.applies(extras)


@pytest.mark.parametrize("text", ["foo ; bogus_var == '1'", "foo ; os_name =", "foo ; (",
                                  "foo ; os_name == 'posix' )", "foo ; os_name < 'posix'",
                                  "!!!"])
def test_marker_fallback_fails_closed(text: str) -> None:
    with pytest.raises(ValueError):
        parse_requirement(text, use_packaging=False)


# --- command -------------------------------------------------------------------------------

def test_command_runs_the_module_from_the_release_lib() -> None:
    rt = parse_runtime(canonical_json(valid()))
    rel = Release(id=H, path=Path("/r") / H, runtime=rt, signed=False)
    argv = command(rel, "--preflight")
    assert argv[:5] == ["/usr/bin/python3.11", "-I", "-S", "-B", "-c"]
    assert argv[-1] == "--preflight"
    assert f"sys.path.insert(0, '/r/{H}/lib')" in argv[5]
    assert "run_module('backend'" in argv[5]
    assert "run_module('a.b_c'" in command(rel, module="a.b_c")[5]
    for bad in ["", "a b", "a;import os", "a..b", "1a"]:
        with pytest.raises(BadRequest):
            command(rel, module=bad)
