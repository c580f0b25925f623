"""Interpreter updates: a changed binary is refused until the operator binds it; a bound
one runs only with the standard library that was reviewed and only for releases of the
same ABI; the plan's digest guards what is recorded."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from guardian import interp
from guardian.manifest import Interpreter
from protocol.errors import Conflict, InterpreterChanged, StateCorrupt


def _binary(tmp_path: Path, content: bytes) -> tuple[str, str]:
    path = tmp_path / "python3.11"
    path.write_bytes(content)
    return str(path), hashlib.sha256(content).hexdigest()


def _looker(version: str = "3.11.9", stdlib: str = "s1", abi: str | None = None):
    def look(path: str) -> interp.Observed:
        sha = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        return interp.Observed(path=path, version=version,
                               abi=abi or interp.abi_of(version), sha256=sha,
                               stdlib=stdlib, files=800, libpython=None)
    return look


def test_the_sealed_binary_passes_and_a_changed_one_is_interpreter_changed(tmp_path):
    path, sha = _binary(tmp_path, b"old python")
    sealed = Interpreter(path=path, version="3.11.2", sha256=sha)
    interp.check(sealed, [], _looker())
    _binary(tmp_path, b"new python")
    with pytest.raises(InterpreterChanged) as e:
        interp.check(sealed, [], _looker())
    assert "tenure release rebind" in e.value.msg
    assert e.value.data["sealed_sha256"] == sha and e.value.data["sealed_version"] == "3.11.2"
    os.unlink(path)
    with pytest.raises(StateCorrupt) as gone:
        interp.check(sealed, [], _looker())
    assert not isinstance(gone.value, InterpreterChanged)


def test_a_reviewed_binding_lets_the_releases_run_again(tmp_path):
    path, sha = _binary(tmp_path, b"old python")
    sealed = Interpreter(path=path, version="3.11.2", sha256=sha)
    _binary(tmp_path, b"new python")
    plan = interp.rebind_plan([("r1", sealed), ("r2", sealed)], [], _looker())
    [one] = plan["interpreters"]
    assert one["releases"] == ["r1", "r2"] and one["refused"] == []
    assert one["now"]["version"] == "3.11.9" and one["now"]["abi"] == "cpython-311"
    store = str(tmp_path / "interpreters.json")
    with pytest.raises(Conflict):
        interp.rebind(store, plan, "0" * 64, [])
    assert not os.path.exists(store)                      # nothing recorded
    interp.rebind(store, plan, plan["digest"], [])
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
    bindings = interp.load_bindings(store)
    interp.check(sealed, bindings, _looker())
    with pytest.raises(InterpreterChanged) as e:          # its stdlib changed since
        interp.check(sealed, bindings, _looker(stdlib="s2"))
    assert "standard library" in e.value.msg
    assert interp.rebind_plan([("r1", sealed)], bindings, _looker())["interpreters"] == []


def test_a_new_minor_version_cannot_be_bound_for_an_old_release(tmp_path):
    path, sha = _binary(tmp_path, b"python 3.11")
    sealed = Interpreter(path=path, version="3.11.2", sha256=sha)
    _binary(tmp_path, b"python 3.12")
    plan = interp.rebind_plan([("r1", sealed)], [], _looker(version="3.12.1"))
    [one] = plan["interpreters"]
    assert one["releases"] == [] and "seal a release under it" in one["refused"][0]["reason"]
    store = str(tmp_path / "interpreters.json")
    interp.rebind(store, plan, plan["digest"], [])        # records nothing to bind
    assert interp.load_bindings(store) == []
    forged = [{**_looker(version="3.12.1")(path).to_json()}]   # a binding of another ABI
    with pytest.raises(InterpreterChanged):
        interp.check(sealed, forged, _looker(version="3.12.1"))


def test_only_the_newest_bindings_per_path_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(interp, "KEEP_PER_PATH", 2)
    store = str(tmp_path / "interpreters.json")
    path, sha = _binary(tmp_path, b"v0")
    sealed = Interpreter(path=path, version="3.11.2", sha256=sha)
    bindings: list = []
    for n in range(1, 4):
        _binary(tmp_path, b"v%d" % n)
        plan = interp.rebind_plan([("r1", sealed)], bindings, _looker())
        bindings = interp.rebind(store, plan, plan["digest"], bindings)
    assert len(bindings) == 2
    assert bindings[0]["sha256"] == hashlib.sha256(b"v3").hexdigest()


def test_an_unreadable_bindings_file_is_state_corrupt(tmp_path):
    store = tmp_path / "interpreters.json"
    store.write_text('{"kind": "tenure-interpreters", "format": 1, "bindings": 3}')
    store.chmod(0o600)
    with pytest.raises(StateCorrupt):
        interp.load_bindings(str(store))


def test_observe_runs_the_interpreter_and_digests_its_standard_library():
    import platform
    import sys
    real = os.path.realpath(sys.executable)
    seen = interp.observe(real)
    assert seen.version == platform.python_version()
    assert seen.abi == sys.implementation.cache_tag and seen.files > 500
    assert interp.observe(real).stdlib == seen.stdlib       # deterministic
