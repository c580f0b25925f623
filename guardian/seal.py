"""Seal a release from the running tree: tenure's packages + their installed dependencies.

``seal(OUT)`` builds a self-contained ``OUT/lib`` that the base interpreter can run with
``-I -S``: tenure's own top-level packages (found through their import spec, because an
editable install's RECORD lists only its .pth/finder files), every file in the RECORD of
each distribution in the runtime dependency closure of ``tenure`` (extras excluded,
markers evaluated), and bytecode compiled with ``UNCHECKED_HASH`` so that sealing the same
tree twice gives byte-identical files and therefore the same release id.

The build happens in a temp directory beside OUT and is renamed into place; OUT is never
overwritten. Sealing does not fsync every file: an installed copy is what must be
durable, and :func:`guardian.release.install` re-hashes everything before it trusts it.
"""

from __future__ import annotations

import base64
import importlib.metadata as md
import importlib.util
import json
import logging
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from protocol.ed25519 import PrivateKey
from protocol.errors import (
    BadRequest,
    Conflict,
    Internal,
    NotFound,
    StateCorrupt,
    StorageFailed,
    UnsafePath,
)
from protocol.storage import storage_failure

from .manifest import (
    DEFAULT_CONTRACTS,
    RUNTIME_NAME,
    SIGNATURE_NAME,
    Interpreter,
    Runtime,
    is_safe_relpath,
    release_id,
)
from .markers import normalize, parse_requirement
from .release import Release
from .treefiles import remove_tree, scan, sha256_file

__all__ = ["DEFAULT_PACKAGES", "dependency_closure", "seal"]

log = logging.getLogger(__name__)

DEFAULT_PACKAGES = ("protocol", "owner", "guardian", "backend", "units")
_SKIP_DIRS = frozenset({"__pycache__", "tests"})
_SKIP_SUFFIXES = (".pyc", ".pyo")


def seal(
    out_dir: Path,
    *,
    packages: Iterable[str] = DEFAULT_PACKAGES,
    distribution: str = "tenure",
    contracts: Mapping[str, int] | None = None,
    signing_key: PrivateKey | None = None,
) -> Release:
    """Build the sealed release ``out_dir`` from the running tree and return it.

    With ``signing_key``, ``RUNTIME.json.sig`` holds the base64 of the raw 64-byte Ed25519
    signature over the RUNTIME.json bytes. ``out_dir``'s parent must exist.

    Raises BadRequest (a contract version that is not a positive integer), Conflict
    (``out_dir`` exists, or two sources claim the same file), NotFound (a
    package or dependency is not installed), UnsafePath (a symlink or special file in a
    package), StateCorrupt (unreadable installed metadata), StorageFailed (the disk
    failed while compiling), OSError.
    """
    out_dir = Path(out_dir)
    wanted = _check_contracts(contracts)
    if os.path.lexists(out_dir):
        raise Conflict(f"{out_dir} already exists", {"path": str(out_dir)})
    if not os.path.isdir(out_dir.parent):
        raise NotFound(f"{out_dir.parent} is not a directory: the sealed release is made "
                       "in a directory that exists", {"path": str(out_dir.parent)})
    plan, roots = _plan_packages(packages)
    for dist in dependency_closure(distribution):
        _merge(plan, _dist_files(dist))
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{secrets.token_hex(6)}"
    try:
        tmp.mkdir(mode=0o755)
        _copy_plan(plan, tmp)
        _write_metadata(tmp, distribution)
        _compile(tmp / "lib", own=frozenset(packages))
        runtime = Runtime(
            tenure_version=md.version(distribution),
            source_commit=_source_commit(roots),
            interpreter=_interpreter(),
            files=_hash_files(tmp),
            contracts=wanted,
        )
        data = _write_runtime(tmp, runtime, signing_key)
        if os.path.lexists(out_dir):
            raise Conflict(f"{out_dir} appeared while sealing", {"path": str(out_dir)})
        os.rename(tmp, out_dir)
    except BaseException:
        if os.path.lexists(tmp):
            remove_tree(tmp)
        raise
    rid = release_id(data)
    return Release(id=rid, path=out_dir, runtime=runtime, signed=signing_key is not None)


def _write_runtime(root: Path, runtime: Runtime, key: PrivateKey | None) -> bytes:
    """Write RUNTIME.json (and its signature with ``key``); return the RUNTIME.json bytes.

    The signature file is the base64 of the raw 64-byte Ed25519 signature and a newline.
    Raises StateCorrupt (a field would not re-parse), OSError.
    """
    data = runtime.encode()
    (root / RUNTIME_NAME).write_bytes(data)
    if key is not None:
        (root / SIGNATURE_NAME).write_bytes(base64.b64encode(key.sign(data)) + b"\n")
    return data


def _check_contracts(contracts: Mapping[str, int] | None) -> dict[str, int]:
    """The contracts to record (the defaults for None). Raises BadRequest for a name that
    is not a non-empty string or a version that is not a positive integer."""
    wanted = dict(DEFAULT_CONTRACTS if contracts is None else contracts)
    for name, version in wanted.items():
        if not isinstance(name, str) or not name or type(version) is not int or version < 1:
            raise BadRequest(f"contract {name!r}: needs a positive integer version",
                             {"contract": str(name)})
    return wanted


def _merge(plan: dict[str, Path], more: Mapping[str, Path]) -> None:
    """Add ``more`` to ``plan``. Raises Conflict when a release path is claimed twice."""
    for rel, src in more.items():
        if rel in plan and plan[rel] != src:
            raise Conflict(f"{rel} comes from both {plan[rel]} and {src}", {"file": rel})
        plan[rel] = src


def _plan_packages(packages: Iterable[str]) -> tuple[dict[str, Path], list[Path]]:
    """{``lib/...``: source file} for tenure's own packages, and their parent directories.

    Raises NotFound (no such module), UnsafePath (symlink or special file), Conflict.
    """
    plan: dict[str, Path] = {}
    roots: list[Path] = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise NotFound(f"package {name!r} is not importable", {"package": name})
        locations = list(spec.submodule_search_locations or [])
        if not locations and spec.origin:  # a plain module
            origin = Path(spec.origin)
            _merge(plan, {f"lib/{origin.name}": origin})
            roots.append(origin.parent)
        for loc in locations:
            _merge(plan, _walk_package(Path(loc), f"lib/{name}"))
            roots.append(Path(loc).parent)
    return plan, roots


def _walk_package(src: Path, prefix: str) -> dict[str, Path]:
    """Source files under a package directory, skipping caches, bytecode, tests and dot
    files. Raises UnsafePath for a symlink or special file."""
    out: dict[str, Path] = {}
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        if entry.name in _SKIP_DIRS or entry.name.startswith("."):
            continue
        rel = f"{prefix}/{entry.name}"
        if entry.is_symlink():
            raise UnsafePath(f"{entry.path}: symlink in a sealed package", {"file": rel})
        if entry.is_dir(follow_symlinks=False):
            out.update(_walk_package(Path(entry.path), rel))
        elif entry.is_file(follow_symlinks=False):
            if not entry.name.endswith(_SKIP_SUFFIXES):
                out[rel] = Path(entry.path)
        else:
            raise UnsafePath(f"{entry.path}: special file in a sealed package", {"file": rel})
    return out


def dependency_closure(distribution: str = "tenure") -> list[md.Distribution]:
    """Installed distributions ``distribution`` needs at run time, recursively, sorted by
    normalised name; ``distribution`` itself is not included. Extras of ``distribution``
    are excluded; extras a dependency asks of another are followed.

    Raises NotFound (a needed distribution is not installed), StateCorrupt (a requirement
    or marker that cannot be read).
    """
    found: dict[str, md.Distribution] = {}
    done: dict[str, frozenset[str]] = {}
    todo: list[tuple[str, frozenset[str]]] = [(normalize(distribution), frozenset())]
    while todo:
        name, extras = todo.pop()
        if name in done and extras <= done[name]:
            continue
        extras = extras | done.get(name, frozenset())
        done[name] = extras
        dist = _distribution(name)
        if name != normalize(distribution):
            found[name] = dist
        for text in dist.requires or []:
            try:
                req = parse_requirement(text)
                wanted = req.applies(extras)
            except ValueError as e:
                raise StateCorrupt(f"{name}: cannot read requirement {text!r}: {e}",
                                   {"distribution": name, "requirement": text}) from e
            if wanted:
                todo.append((req.name, req.extras))
    return [found[n] for n in sorted(found)]


def _distribution(name: str) -> md.Distribution:
    """Raises NotFound if ``name`` is not installed."""
    try:
        return md.distribution(name)
    except md.PackageNotFoundError as e:
        raise NotFound(f"distribution {name!r} is not installed", {"distribution": name}) from e


def _dist_files(dist: md.Distribution) -> dict[str, Path]:
    """{``lib/...``: source file} from the distribution's RECORD, without files outside
    site-packages and without bytecode. Raises StateCorrupt (no RECORD, a listed file
    missing), UnsafePath (a listed file is a symlink)."""
    name = dist.metadata["Name"]
    if dist.files is None:
        raise StateCorrupt(f"{name}: no RECORD, cannot list its files", {"distribution": name})
    out: dict[str, Path] = {}
    for f in dist.files:
        rel = PurePosixPath(f).as_posix()
        parts = rel.split("/")
        if not is_safe_relpath(rel) or "__pycache__" in parts or rel.endswith(_SKIP_SUFFIXES):
            continue
        src = Path(str(dist.locate_file(f)))
        if os.path.islink(src):
            raise UnsafePath(f"{src}: symlink listed by {name}", {"file": rel})
        if not src.is_file():
            raise StateCorrupt(f"{name}: {rel} is listed in RECORD but missing",
                               {"distribution": name, "file": rel})
        out[f"lib/{rel}"] = src
    return out


def _copy_plan(plan: Mapping[str, Path], root: Path) -> None:
    """Copy every planned file to ``root/<rel>``. Raises OSError."""
    for rel in sorted(plan):
        dst = root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plan[rel], dst, follow_symlinks=False)


def _write_metadata(root: Path, distribution: str) -> None:
    """A minimal dist-info so ``importlib.metadata.version(distribution)`` works inside the
    release (the editable install's own dist-info describes the source tree instead)."""
    version = md.version(distribution)
    info = root / "lib" / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n", encoding="utf-8"
    )


# Run by a fresh interpreter (-I -S): the bytes marshal writes depend on which strings
# the compiling process has interned (a flag per string), so bytecode compiled inside a
# command that imported other things (`tenure up`) differed from `tenure release seal`'s
# by a byte here and there, and so did the release id. One line of JSON per source that
# did not compile: [relative path, exception name, message, line or null]. A file that
# cannot be read or written (py_compile lets OSError through: a full disk) ends it, with
# `ERRNO <errno> <path as JSON>` as the last line of stderr, so the parent can tell a
# failing disk from a defect.
_COMPILE = """
import json, py_compile, sys, warnings
lib = sys.argv[1]
warnings.simplefilter("ignore")
for rel in sys.stdin.read().split("\\0"):
    if not rel:
        continue
    try:
        py_compile.compile(lib + "/" + rel, dfile=rel, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    except py_compile.PyCompileError as e:
        why = e.exc_value
        said = why.msg if isinstance(why, SyntaxError) else str(why)
        line = why.lineno if isinstance(why, SyntaxError) else None
        print(json.dumps([rel, e.exc_type_name, said, line]), flush=True)
    except OSError as e:
        path = e.filename if isinstance(e.filename, str) else lib + "/" + rel
        print("ERRNO %d %s" % (e.errno or 0, json.dumps(path)), file=sys.stderr, flush=True)
        sys.exit(1)
"""
_ERRNO_LINE = re.compile(r"ERRNO (\d+) (\".*\")")


def _compile(lib: Path, own: frozenset[str] = frozenset()) -> None:
    """Compile every .py under ``lib`` to __pycache__ with UNCHECKED_HASH pycs, in a
    fresh interpreter (:data:`_COMPILE` says why), in sorted order: the same tree gives
    the same bytes, whoever seals it.

    The recorded source name is the path relative to ``lib`` so the bytes do not depend on
    where the build ran. A dependency's file that does not compile gets no pyc (logged),
    as pip does; one of tenure's own packages (``own``) refuses the seal: a release with
    it would fail wherever it is imported, at the latest in a handoff. Raises
    BadRequest; StorageFailed, naming the path, when a file could not be read or
    written for a full disk, a quota, an I/O error or a read-only file system; and
    Internal when the compiling interpreter fails otherwise.
    """
    sources = sorted(p.relative_to(lib).as_posix() for p in lib.rglob("*.py")
                     if "__pycache__" not in p.parts)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", _COMPILE, str(lib)],
                          input="\0".join(sources), capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise _compile_failure(done.returncode, done.stderr)
    for line in done.stdout.splitlines():
        rel, kind, said, at = json.loads(line)
        if rel.split("/")[0] in own:
            where = f":{at}" if at else ""
            raise BadRequest(f"{rel}{where} does not compile ({kind}: {said}); nothing was "
                             "sealed", {"file": rel})
        log.warning("not compiled: %s: %s: %s", rel, kind, said)


def _compile_failure(status: int, stderr: str) -> StorageFailed | Internal:
    """What the compiling interpreter's failure means: STORAGE_FAILED when its last
    line names an errno of failing storage (:data:`_COMPILE`), else INTERNAL."""
    lines = stderr.strip().splitlines()
    found = _ERRNO_LINE.fullmatch(lines[-1]) if lines else None
    if found is not None:
        number, path = int(found.group(1)), json.loads(found.group(2))
        failed = storage_failure(OSError(number, os.strerror(number), path),
                                 "compiling the release", path)
        if failed is not None:
            return failed
    return Internal(f"compiling the release failed (exit {status}): "
                    f"{stderr.strip()[-500:]}")


def _hash_files(root: Path) -> dict[str, str]:
    """{rel: sha256} of every file under ``root/lib``. Raises UnsafePath, OSError."""
    files, _ = scan(root)
    return {rel: sha256_file(root / rel, rel) for rel in sorted(files)}


def _interpreter() -> Interpreter:
    """The base interpreter behind ``sys.executable`` (a venv's bin/python is a symlink).

    Raises NotFound when the interpreter path is unknown.
    """
    if not sys.executable:
        raise NotFound("sys.executable is unknown; cannot record the interpreter")
    path = Path(os.path.realpath(sys.executable))
    return Interpreter(path=str(path), version=platform.python_version(),
                       sha256=sha256_file(path))


def _source_commit(roots: Iterable[Path]) -> str | None:
    """git HEAD of the tree the packages came from if that tree is a clean git work tree
    whose top level is the packages' parent; None otherwise. Never raises."""
    parents = {os.path.realpath(r) for r in roots}
    if len(parents) != 1:
        return None
    repo = parents.pop()
    top = _git(repo, "rev-parse", "--show-toplevel")
    if top is None or os.path.realpath(top.strip()) != repo:
        return None
    status = _git(repo, "status", "--porcelain")
    if status is None or status.strip():
        return None
    head = _git(repo, "rev-parse", "HEAD")
    return head.strip() if head is not None else None


def _git(repo: str, *args: str) -> str | None:
    """stdout of a read-only git command (no optional locks), or None. Never raises."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_OPTIONAL_LOCKS"] = "0"
    try:
        proc = subprocess.run(
            ["git", "--no-optional-locks", "-C", repo, *args],
            capture_output=True, text=True, timeout=30, env=env, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None
