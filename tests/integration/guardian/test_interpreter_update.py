"""An update of the Python a release runs under does not brick the home (issue:
interpreter updates). A release sealed under a copy of this machine's interpreter runs;
the copy is then replaced by another binary of the same version, as a package update
would: the release no longer verifies (INTERPRETER_CHANGED) and an upgrade to it is
refused before the running backend is touched; `tenure release rebind` shows the change
and, given the reviewed digest, binds it; the release then verifies and runs again."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_handoff_support import backend_procs, config, derive_release, install

from guardian.treefiles import sha256_file


def _swap(copy: Path) -> None:
    """Another binary of the same Python at the same path, as an update leaves it."""
    new = copy.with_name(copy.name + ".new")
    new.write_bytes(copy.read_bytes() + b"\0" * 64)   # runs the same, hashes differently
    new.chmod(0o755)
    os.replace(new, copy)


def _code(res) -> str:
    return json.dumps(res.out) + res.stderr


def test_an_updated_interpreter_is_refused_until_bound_then_runs(cluster, sealed_release,
                                                                 copied_python, tmp_path):
    cluster.up(config(sleepers=1))
    cluster.wait_ready(1)
    version = platform.python_version()
    rel_dir = tmp_path / "under-copy"
    derive_release(sealed_release, rel_dir, {}, interpreter={
        "path": str(copied_python), "version": version, "sha256": sha256_file(copied_python)})
    rid = install(cluster, rel_dir)
    first = cluster.cli("backend", "upgrade", rid, timeout=300)
    assert first.ok, first
    assert psutil.Process(cluster.backend_pid()).exe() == str(copied_python)

    _swap(copied_python)
    pids, backend = cluster.pids(), cluster.backend_pid()
    verify = cluster.cli("release", "verify", rid)
    assert verify.code != 0 and "INTERPRETER_CHANGED" in _code(verify)
    refused = cluster.cli("backend", "upgrade", rid, timeout=300)
    assert refused.code != 0 and "INTERPRETER_CHANGED" in _code(refused)
    assert cluster.backend_pid() == backend and cluster.pids() == pids   # untouched

    plan = cluster.cli("release", "rebind", check=True).out
    [changed] = plan["interpreters"]
    assert changed["path"] == str(copied_python) and changed["releases"] == [rid]
    assert changed["now"]["version"] == version and plan["bound"] is False
    assert "tenure release rebind --digest" in cluster.cli_text("release", "rebind")
    wrong = cluster.cli("release", "rebind", "--digest", "0" * 64)
    assert wrong.code != 0 and "CONFLICT" in _code(wrong)
    bound = cluster.cli("release", "rebind", "--digest", plan["digest"], check=True).out
    assert bound["bound"] is True
    assert (cluster.home / "runtime" / "interpreters.json").stat().st_mode & 0o777 == 0o600

    assert cluster.cli("release", "verify", rid).ok
    again = cluster.cli("backend", "upgrade", rid, timeout=300)
    assert again.ok and again.out["activation"]["phase"] == "complete", again
    assert psutil.Process(cluster.backend_pid()).exe() == str(copied_python)
    assert cluster.pids() == pids and len(backend_procs(cluster.home)) == 1
    assert cluster.cli("release", "rebind", check=True).out["interpreters"] == []
