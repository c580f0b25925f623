"""The owner verifies its release under the same trust as the guardian: the operator's
trusted release keys and the interpreter bindings of `tenure release rebind`. It
verified with neither, so after a bound Python update the owner refused the release the
guardian ran (INTERPRETER_CHANGED), and with keys trusted it ran an unsigned release the
guardian refused (BAD_SIGNATURE)."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import derive_release

from backend.cli.ownerplan import check_release
from guardian.interp import rebind, rebind_plan
from guardian.manifest import RUNTIME_NAME, Interpreter, parse_runtime
from guardian.paths import GuardianPaths
from guardian.release import install
from guardian.treefiles import sha256_file
from owner.release import direct_command, verified
from protocol.ed25519 import PrivateKey
from protocol.errors import BadSignature, InterpreterChanged
from protocol.grant import public_key_text
from protocol.layout import Layout


def _home(short_home: Path, sealed: Path, **interpreter: str) -> tuple[Layout, str]:
    """A home whose guardian's releases hold one release (the owner's own uid's: the
    owner runs that copy) derived from ``sealed``."""
    paths = GuardianPaths(short_home)
    paths.runtime.mkdir(mode=0o700)
    src = short_home / "src"
    derive_release(sealed, src, {}, interpreter=interpreter or None)
    rel = install(src, paths.releases)
    return Layout(short_home), rel.id


def test_a_bound_interpreter_update_lets_the_owner_run_its_release(
        short_home: Path, sealed_release: Path, copied_python: Path) -> None:
    layout, rid = _home(short_home, sealed_release, path=str(copied_python),
                        version=platform.python_version(), sha256=sha256_file(copied_python))
    verified(layout, rid)
    new = copied_python.with_name(copied_python.name + ".new")   # a package update
    new.write_bytes(copied_python.read_bytes() + b"\0" * 64)
    new.chmod(0o755)
    os.replace(new, copied_python)
    with pytest.raises(InterpreterChanged):
        verified(layout, rid)
    paths = GuardianPaths(layout.home)
    plan = rebind_plan([(rid, _interp(layout, rid))], [])   # `tenure release rebind`
    rebind(paths.interpreters, plan, plan["digest"], [])
    assert verified(layout, rid).id == rid          # the owner's follow() and `tenure up`
    check_release(layout, rid, os.geteuid())        # `tenure owner upgrade`


def _interp(layout: Layout, rid: str) -> Interpreter:
    return parse_runtime((layout.releases / rid / RUNTIME_NAME).read_bytes()).interpreter


def test_with_trusted_keys_the_owner_refuses_an_unsigned_release(
        short_home: Path, sealed_release: Path) -> None:
    layout, rid = _home(short_home, sealed_release)
    from owner.release import OwnerRelease, save
    layout.execution.mkdir(mode=0o700)
    save(str(layout.owner_release), OwnerRelease(rid))
    assert direct_command(layout, "info") is not None
    key = PrivateKey.generate().public_key()
    keys = Path(GuardianPaths(layout.home).trusted_keys)
    keys.write_text(public_key_text(key) + "\n")
    keys.chmod(0o600)
    with pytest.raises(BadSignature):
        verified(layout, rid)
    with pytest.raises(BadSignature):
        direct_command(layout, "info")              # `tenure up` starts the installed code
    with pytest.raises(BadSignature):
        check_release(layout, rid, os.geteuid())
