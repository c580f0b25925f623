"""Which Python interpreter a release runs under, and which updates of it the operator
accepted.

A release records the interpreter it was sealed under (path, version, sha256 of the
binary). A routine update of that Python (3.11.2 to 3.11.9 by the package manager)
replaces the binary, so every release, the rollback target included, would fail
verification and nothing could start. Instead of trusting any new binary, the operator
reviews the update and *binds* it: ``tenure release rebind`` shows, per interpreter
path, the binary now there, its version and ABI, a digest of its standard library (every
``.py`` and extension module under the stdlib directory, and the shared libpython when
there is one) and which releases it would let run; ``--digest D`` records exactly that
in ``runtime/interpreters.json``. A release then runs under a binary that is either the
one it was sealed with or a bound one of the same ABI (``cpython-311``: the release's
bytecode needs it) whose standard library is still the one reviewed. Anything else is
INTERPRETER_CHANGED, and nothing runs.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from protocol.durable import atomic_write_json, read_json
from protocol.errors import Conflict, InterpreterChanged, StateCorrupt, TenureError

from .manifest import Interpreter, canonical_json

__all__ = ["BINDINGS_KIND", "Observed", "abi_of", "check", "load_bindings", "observe",
           "rebind", "rebind_plan"]

BINDINGS_KIND = "tenure-interpreters"
KEEP_PER_PATH = 10          # bindings kept per interpreter path (the newest)
OBSERVE_TIMEOUT = 60.0

# Run by the interpreter under review with -I -S: its version, ABI tag, and a digest of
# its standard library (sorted relative paths and sha256 of .py and extension modules;
# site-packages and tests are not the stdlib) and of libpython when it is shared.
_PROBE = r"""
import hashlib, json, os, sys, sysconfig
root = sysconfig.get_paths()["stdlib"]
skip = {"__pycache__", "site-packages", "dist-packages", "test", "tests", "idle_test"}
h, n = hashlib.sha256(), 0
for d, dirs, files in os.walk(root):
    dirs[:] = sorted(x for x in dirs if x not in skip)
    for f in sorted(files):
        if f.endswith((".py", ".so")):
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                h.update(os.path.relpath(p, root).encode() + b"\0" +
                         hashlib.sha256(fh.read()).digest())
            n += 1
lib = None
if sysconfig.get_config_var("Py_ENABLE_SHARED"):
    p = os.path.join(sysconfig.get_config_var("LIBDIR") or "",
                     sysconfig.get_config_var("LDLIBRARY") or "")
    if os.path.isfile(p):
        with open(p, "rb") as fh:
            lib = hashlib.sha256(fh.read()).hexdigest()
print(json.dumps({"version": "%d.%d.%d" % sys.version_info[:3],
                  "abi": sys.implementation.cache_tag, "stdlib": h.hexdigest(),
                  "files": n, "libpython": lib}))
"""


@dataclass(frozen=True)
class Observed:
    """An interpreter as it is on disk now."""

    path: str
    version: str
    abi: str
    sha256: str
    stdlib: str
    files: int
    libpython: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def abi_of(version: str) -> str:
    """``3.11.7`` → ``cpython-311``: the bytecode tag a release sealed under it needs."""
    major, minor = version.split(".")[:2]
    return f"cpython-{major}{minor}"


def _sha256(path: str) -> str:
    from .treefiles import sha256_file
    return sha256_file(Path(path))


def observe(path: str, timeout: float = OBSERVE_TIMEOUT) -> Observed:
    """Look at the interpreter at ``path`` (runs it once). Raises InterpreterChanged when
    it is missing or does not run."""
    try:
        sha = _sha256(path)
        out = subprocess.run([path, "-I", "-S", "-c", _PROBE], capture_output=True,
                             timeout=timeout, check=True, stdin=subprocess.DEVNULL).stdout
        info = json.loads(out)
    except (TenureError, OSError, subprocess.SubprocessError, ValueError) as exc:
        raise InterpreterChanged(f"interpreter {path} cannot be examined: {exc}",
                                 {"file": path, "problem": "interpreter"}) from None
    return Observed(path=path, version=str(info["version"]), abi=str(info["abi"]),
                    sha256=sha, stdlib=str(info["stdlib"]), files=int(info["files"]),
                    libpython=info["libpython"])


def load_bindings(path: str) -> list[dict[str, Any]]:
    """The recorded bindings ([] when none were made). Raises StateCorrupt, UnsafePath."""
    try:
        obj = read_json(path, BINDINGS_KIND)
    except FileNotFoundError:
        return []
    bindings = obj.get("bindings")
    if not isinstance(bindings, list) or not all(
            isinstance(b, dict) and isinstance(b.get("path"), str)
            and isinstance(b.get("sha256"), str) for b in bindings):
        raise StateCorrupt(f"{path}: bindings is not a list of interpreter records",
                           {"path": path})
    return bindings


def _binding(bindings: Iterable[dict[str, Any]], interp: Interpreter, sha: str
             ) -> dict[str, Any] | None:
    abi = abi_of(interp.version)
    for b in bindings:
        if b["path"] == interp.path and b["sha256"] == sha and b.get("abi") == abi:
            return b
    return None


def check(interp: Interpreter, bindings: list[dict[str, Any]],
          look: Callable[[str], Observed] = observe) -> None:
    """Raises InterpreterChanged unless ``interp.path`` holds the sealed binary, or a
    bound one of the release's ABI whose standard library is the one reviewed; raises
    StateCorrupt when the interpreter is gone or unreadable."""
    try:
        sha = _sha256(interp.path)
    except (TenureError, OSError) as e:
        raise StateCorrupt(f"interpreter {interp.path} is unusable: {e}",
                           {"file": interp.path, "problem": "interpreter"}) from e
    if sha == interp.sha256:
        return
    data = {"file": interp.path, "problem": "interpreter", "sealed_sha256": interp.sha256,
            "current_sha256": sha, "sealed_version": interp.version}
    bound = _binding(bindings, interp, sha)
    if bound is None:
        raise InterpreterChanged(
            f"interpreter {interp.path} changed since the release was sealed (Python "
            f"{interp.version}); if it is an update of the same Python, review and bind "
            "it: `tenure release rebind`", data)
    now = look(interp.path)
    if (now.sha256, now.stdlib, now.libpython) != (sha, bound.get("stdlib"),
                                                   bound.get("libpython")):
        raise InterpreterChanged(
            f"the standard library of {interp.path} changed since it was bound; review "
            "it again: `tenure release rebind`", data)


def rebind_plan(releases: Iterable[tuple[str, Interpreter]], bindings: list[dict[str, Any]],
                look: Callable[[str], Observed] = observe) -> dict[str, Any]:
    """What a rebind would record: per interpreter path whose binary changed, what is
    there now and which releases it would let run (``releases``: (id, interpreter) of
    each installed release); releases it cannot help are listed with the reason. The
    digest covers all of it."""
    by_path: dict[str, list[tuple[str, Interpreter]]] = {}
    for rid, interp in releases:
        try:
            check(interp, bindings, look)
        except StateCorrupt:          # changed (InterpreterChanged), or gone
            by_path.setdefault(interp.path, []).append((rid, interp))
    out = [_for_path(path, rels, look) for path, rels in sorted(by_path.items())]
    return {"interpreters": out,
            "digest": hashlib.sha256(canonical_json(out)).hexdigest()}


def _for_path(path: str, rels: list[tuple[str, Interpreter]],
              look: Callable[[str], Observed]) -> dict[str, Any]:
    try:
        now = look(path).to_json()
    except InterpreterChanged as exc:
        return {"path": path, "now": None, "releases": [],
                "refused": [{"release": rid, "reason": exc.msg} for rid, _ in rels]}
    ok = [rid for rid, i in rels if abi_of(i.version) == now["abi"]]
    refused = [{"release": rid, "reason": f"sealed under Python {i.version} "
                f"({abi_of(i.version)}); the interpreter is now {now['version']} "
                f"({now['abi']}): seal a release under it"}
               for rid, i in rels if abi_of(i.version) != now["abi"]]
    return {"path": path, "now": now, "releases": sorted(ok), "refused": refused}


def rebind(path: str, plan: dict[str, Any], digest: str,
           bindings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Record the bindings of ``plan`` if its digest is ``digest`` (the one the operator
    reviewed). Returns the new bindings. Raises Conflict (another digest: the plan is
    not what was reviewed any more)."""
    if plan["digest"] != digest:
        raise Conflict("the interpreters changed since that plan was shown; review "
                       "`tenure release rebind` again", {"digest": plan["digest"]})
    new = [{**i["now"], "bound_at": time.time(), "releases": i["releases"]}
           for i in plan["interpreters"] if i["releases"]]
    kept: list[dict[str, Any]] = []
    for b in [*new, *bindings]:
        if sum(k["path"] == b["path"] for k in kept) < KEEP_PER_PATH:
            kept.append(b)
    atomic_write_json(path, {"kind": BINDINGS_KIND, "format": 1, "bindings": kept})
    return kept
