"""Installed sealed releases: verify, install, list, and the command that runs one.

A release directory holds exactly ``RUNTIME.json``, optionally ``RUNTIME.json.sig``, and
the files that RUNTIME.json lists (all under ``lib/``). Its id is the sha256 of
RUNTIME.json (see :mod:`guardian.manifest`); an installed release lives at
``releases/<id>/`` as a read-only tree. Invariants kept here:

- nothing is trusted that was not re-hashed: :func:`verify` recomputes every digest, and
  :func:`install` verifies the source, copies, then verifies the copy before the rename
  that publishes it;
- no symlinks and no special files anywhere in a release (files are opened with
  ``O_NOFOLLOW``), no file or directory that RUNTIME.json does not account for;
- ``releases/<id>/`` appears atomically (temp dir + fsync + rename + fsync of the parent)
  and is never overwritten: different content under an existing id is a ``Conflict``.

Building a release from the running tree is :mod:`guardian.seal`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import os
import re
import stat
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from protocol.errors import (
    BadRequest,
    BadSignature,
    Conflict,
    InterpreterChanged,
    NotFound,
    StateCorrupt,
    TenureError,
    UnsafePath,
)

if TYPE_CHECKING:
    from protocol.ed25519 import PublicKey

from .exchange import exchange
from .manifest import (
    RUNTIME_NAME,
    SIGNATURE_NAME,
    Interpreter,
    Runtime,
    is_release_id,
    parse_runtime,
    release_id,
)
from .treefiles import (
    CHUNK,
    RO_DIR,
    RO_FILE,
    fsync_dir,
    identity,
    identity_digest,
    identity_line,
    make_durable,
    make_readonly,
    open_regular,
    remove_tree,
    scan,
    sha256_stat,
)

__all__ = [
    "Release",
    "ReleaseStatus",
    "ReleaseSummary",
    "command",
    "exec_release",
    "install",
    "list_releases",
    "summarize",
    "verify",
]

_MAX_RUNTIME_BYTES = 16 << 20
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Release:
    """A release whose files were all hashed and found equal to its RUNTIME.json."""

    id: str
    path: Path
    runtime: Runtime
    signed: bool
    repaired: str | None = None   # install: why the copy it replaced did not verify

    @property
    def lib(self) -> Path:
        return self.path / "lib"

    @property
    def tenure_version(self) -> str:
        return self.runtime.tenure_version

    @property
    def source_commit(self) -> str | None:
        return self.runtime.source_commit

    @property
    def interpreter(self) -> Interpreter:
        return self.runtime.interpreter

    @property
    def contracts(self) -> Mapping[str, int]:
        return self.runtime.contracts


class ReleaseStatus(StrEnum):
    """Outcome of the cheap check in :func:`list_releases` (stored/wire values)."""

    OK = "ok"  # RUNTIME.json parses and hashes to the directory name; files not hashed
    CORRUPT = "corrupt"  # unreadable, malformed, misnamed or not a directory
    INCOMPLETE = "incomplete"  # temp directory left by an interrupted install
    MISSING = "missing"  # no such entry: a release the selector names was deleted


@dataclass(frozen=True)
class ReleaseSummary:
    """One entry of ``releases/``, from RUNTIME.json alone."""

    name: str
    path: Path
    status: ReleaseStatus
    tenure_version: str | None = None
    source_commit: str | None = None
    contracts: Mapping[str, int] | None = None
    file_count: int = 0
    runs_under: Interpreter | None = None    # the interpreter as sealed (path, version, sha)
    reason: str | None = None


# --- checking a tree against its RUNTIME.json -------------------------------------------


def _read_small(path: Path, rel: str) -> bytes:
    """Whole content of a small regular file. Raises UnsafePath, NotFound, StateCorrupt."""
    with os.fdopen(open_regular(path, rel), "rb") as f:
        data = f.read(_MAX_RUNTIME_BYTES + 1)
    if len(data) > _MAX_RUNTIME_BYTES:
        raise StateCorrupt(f"{rel}: larger than {_MAX_RUNTIME_BYTES} bytes", {"file": rel})
    return data


def _check_tree(root: Path, runtime: Runtime, seen: dict[str, bytes] | None = None) -> None:
    """Every listed file present and equal, nothing unlisted. ``seen``: identities of
    trees hashed in full before (:func:`identity`, by root); a tree whose files are the
    very files hashed then is not hashed again, and one hashed now is recorded.

    Raises StateCorrupt naming the first (sorted) extra, missing or mismatching file or
    directory; UnsafePath for symlinks and special files.
    """
    found, dirs = scan(root)
    found -= {RUNTIME_NAME, SIGNATURE_NAME}
    listed = runtime.files.keys()
    for what, names in (("unexpected file", found - listed), ("missing file", listed - found),
                        ("unexpected directory", dirs - runtime.dirs)):
        if names:
            rel = min(names)
            raise StateCorrupt(f"{what} {rel}", {"file": rel, "problem": what})
    known = None if seen is None else seen.get(str(root))
    if known is not None and identity(root, listed) == known:
        return
    # each file's identity is its status taken before its content is read: a file
    # changed after that has another ctime, so the identity stored below does not match
    # it at the next check
    base, lines = str(root) + "/", []
    for rel in sorted(listed):
        try:
            digest, st = sha256_stat(base + rel, rel)
        except NotFound as e:  # vanished while we looked
            raise StateCorrupt(f"missing file {rel}", {"file": rel}) from e
        if digest != runtime.files[rel]:
            raise StateCorrupt(f"content of {rel} does not match RUNTIME.json",
                               {"file": rel, "problem": "hash mismatch"})
        lines.append(identity_line(rel, st))
    if seen is not None:
        seen[str(root)] = identity_digest(lines)


def _check_root(root: Path) -> None:
    """Raises NotFound if ``root`` is missing or cannot be looked at (a name too long, a
    NUL), UnsafePath if a symlink or not a directory."""
    try:
        st = os.lstat(root)
    except FileNotFoundError as e:
        raise NotFound(f"{root}: no such release", {"path": str(root)}) from e
    except (OSError, ValueError) as e:   # a name too long, a NUL, a file on the way
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise NotFound(f"{str(root)[:200]}: no release can be there ({why})",
                       {"path": str(root)[:4096]}) from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{root}: not a real directory", {"path": str(root)})


def _load(root: Path, expect_id: str | None, seen: dict[str, bytes] | None = None
          ) -> tuple[Release, bytes]:
    """Read, parse and fully hash the release at ``root`` (``seen``: see _check_tree);
    return it and its RUNTIME.json.

    Raises NotFound (no such directory), UnsafePath, StateCorrupt (also when the id is not
    ``expect_id``).
    """
    _check_root(root)
    try:
        data = _read_small(root / RUNTIME_NAME, RUNTIME_NAME)
    except NotFound as e:
        raise StateCorrupt(f"{root}: no {RUNTIME_NAME}", {"file": RUNTIME_NAME}) from e
    rid = release_id(data)
    if expect_id is not None and rid != expect_id:
        raise StateCorrupt(f"{RUNTIME_NAME} hashes to {rid}, expected {expect_id}",
                           {"file": RUNTIME_NAME, "expected": expect_id, "actual": rid})
    runtime = parse_runtime(data)
    _check_tree(root, runtime, seen)
    signed = os.path.lexists(root / SIGNATURE_NAME)
    return Release(id=rid, path=root, runtime=runtime, signed=signed), data


def _check_interpreter(interp: Interpreter, bindings: list[dict[str, Any]] | None) -> None:
    """Raises StateCorrupt if the recorded interpreter is gone, InterpreterChanged if its
    bytes changed and no binding the operator made vouches for them (guardian.interp)."""
    from .interp import check
    check(interp, bindings or [])


def _check_signature(root: Path, data: bytes, trusted_keys: Iterable[PublicKey]) -> None:
    """RUNTIME.json.sig (base64 of a raw 64-byte Ed25519 signature over RUNTIME.json) must
    verify under one of ``trusted_keys``. Raises BadSignature otherwise, UnsafePath for a
    symlinked signature file.
    """
    try:
        text = _read_small(root / SIGNATURE_NAME, SIGNATURE_NAME)
    except NotFound as e:
        raise BadSignature(f"{root}: release is not signed", {"file": SIGNATURE_NAME}) from e
    try:
        sig = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as e:
        raise BadSignature(f"{SIGNATURE_NAME} is not base64", {"file": SIGNATURE_NAME}) from e
    if any(key.verify(sig, data) for key in trusted_keys):
        return
    raise BadSignature(f"{SIGNATURE_NAME}: no trusted key verifies it", {"file": SIGNATURE_NAME})


# --- public operations -----------------------------------------------------------------


def verify(
    release_dir: Path,
    expected_id: str | None = None,
    *,
    trusted_keys: Iterable[PublicKey] | None = None,
    bindings: list[dict[str, Any]] | None = None,
    seen: dict[str, bytes] | None = None,
) -> Release:
    """Recompute everything about the release at ``release_dir`` and return it.

    The id (sha256 of RUNTIME.json) must equal ``expected_id``, or the directory name when
    ``expected_id`` is None. Every listed file is hashed; unlisted files or directories,
    missing files, symlinks and special files are refused; the interpreter must exist with
    the recorded sha256 or one of ``bindings`` (runtime/interpreters.json); with
    ``trusted_keys`` the signature must verify. ``seen``: a long-lived caller's memo of
    the trees it hashed in full; files that are still the very files hashed then (same
    device, inode, size, mode, mtime and ctime) are not hashed again.

    Raises NotFound (no such directory), UnsafePath (symlink/special file),
    StateCorrupt (``data["file"]`` names the first bad file), BadSignature, OSError (I/O,
    e.g. an unreadable directory).
    """
    release_dir = Path(release_dir)
    release, data = _load(release_dir, expected_id or release_dir.name, seen)
    _check_interpreter(release.interpreter, bindings)
    if trusted_keys is not None:
        _check_signature(release_dir, data, trusted_keys)
    return release


def install(
    src: Path,
    releases_dir: Path,
    *,
    trusted_keys: Iterable[PublicKey] | None = None,
    bindings: list[dict[str, Any]] | None = None,
) -> Release:
    """Copy the sealed release at ``src`` to ``releases_dir/<id>/`` as a read-only tree.

    ``src`` is verified completely (its directory name does not matter), copied into a
    temp directory beside the target, verified again, made read-only, fsynced and renamed;
    the parent is fsynced. An existing identical ``<id>/`` is returned as is. An existing
    ``<id>/`` directory that does not verify (a file edited or removed under it) is a
    damaged copy of this very release, whose id is the hash of its content: it is
    replaced by the verified copy in one step (guardian.exchange), also while a backend
    runs from it, and removed; ``repaired`` says what was wrong with it.

    Raises NotFound (no ``src``), UnsafePath, StateCorrupt (bad source or interpreter
    mismatch), BadSignature (``trusted_keys`` given and no valid signature), Conflict
    (``<id>/`` is a symlink or not a directory), OSError (I/O).
    """
    src, releases_dir = Path(src), Path(releases_dir)
    source, data = _load(src, None)
    _check_interpreter(source.interpreter, bindings)
    keys = None if trusted_keys is None else list(trusted_keys)
    if keys is not None:
        _check_signature(src, data, keys)
    _ensure_dir(releases_dir)
    target = releases_dir / source.id
    signed = src if keys is not None else None
    damaged: Conflict | None = None
    if os.path.lexists(target):
        try:
            return _existing(target, source.id, keys, bindings, signed)
        except Conflict as e:
            if os.path.islink(target) or not os.path.isdir(target):
                raise
            damaged = e   # replaced below by the verified copy
    tmp = releases_dir / f"{source.id}.tmp-{os.urandom(6).hex()}"
    try:
        _copy_release(source, tmp)
        copied, _ = _load(tmp, source.id)
        make_readonly(tmp)
        make_durable(tmp)
        if damaged is not None:
            exchange(tmp, target)   # tmp is now the damaged copy, removed below
            fsync_dir(releases_dir)
            remove_tree(tmp)
            cause = damaged.__cause__
            return replace(copied, path=target, repaired=cause.msg if isinstance(
                cause, TenureError) else damaged.msg)
        try:
            os.rename(tmp, target)
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            remove_tree(tmp)  # another installer won the race
            return _existing(target, source.id, keys, bindings, signed)
        fsync_dir(releases_dir)
    except BaseException:
        if os.path.lexists(tmp):
            remove_tree(tmp)
        raise
    return replace(copied, path=target)


def _existing(
    target: Path, rid: str, trusted_keys: list[PublicKey] | None,
    bindings: list[dict[str, Any]] | None, signed: Path | None = None,
) -> Release:
    """The already installed ``target`` if it verifies as release ``rid`` (and, with
    ``trusted_keys``, carries a valid signature). With ``signed``, the source whose
    signature verified under ``trusted_keys``: a copy that is this release in every
    file but lacks that signature (installed before the keys were trusted; sealing is
    reproducible, so signing the same tree gives the same id) is given it. Raises
    Conflict otherwise."""
    try:
        try:
            return verify(target, rid, trusted_keys=trusted_keys, bindings=bindings)
        except BadSignature:
            if signed is None:
                raise
            verify(target, rid, trusted_keys=None, bindings=bindings)   # the rest is it
            _attach_signature(target, signed)
            return verify(target, rid, trusted_keys=trusted_keys, bindings=bindings)
    except InterpreterChanged:
        raise   # the same release; its interpreter is what changed
    except (StateCorrupt, UnsafePath, BadSignature, NotFound) as e:
        raise Conflict(
            f"{target} exists and is not this release: {e}",
            {"release": rid, "path": str(target), "reason": e.code_str, **e.data},
        ) from e


def _attach_signature(target: Path, signed: Path) -> None:
    """Put the signature of the verified release at ``signed`` into the installed copy
    ``target`` of the same release: written beside the release (``.<id>.sig.tmp-*`` in
    releases/, never inside it: a crash before the rename would leave a file the
    release does not list, and so a release that no longer verifies), flushed, renamed
    in, the directory flushed and made read-only again. A crash leaves at most that
    temporary file, listed as ``incomplete`` and removed by a prune. Raises OSError."""
    sig = (signed / SIGNATURE_NAME).read_bytes()
    tmp = target.parent / f".{target.name}.sig.tmp-{os.urandom(6).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                 os.O_CLOEXEC, 0o444)
    try:
        try:
            os.write(fd, sig)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(target, 0o755, follow_symlinks=False)
        try:
            os.rename(tmp, target / SIGNATURE_NAME)
            fsync_dir(target)
        finally:
            os.chmod(target, RO_DIR, follow_symlinks=False)
        fsync_dir(target.parent)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def command(release: Release, *args: str, module: str = "backend") -> list[str]:
    """argv that runs ``python -m <module> *args`` from the release's own ``lib/``.

    The base interpreter runs with ``-I -S -B``: no environment variables, no user or
    system site-packages, no bytecode writes; ``lib/`` is inserted first on sys.path.
    This does not verify: get ``release`` from :func:`verify` right before running it.
    Raises BadRequest for a ``module`` that is not a dotted Python name.
    """
    if _MODULE.fullmatch(module) is None:
        raise BadRequest(f"not a module name: {module!r}", {"module": module})
    boot = (
        f"import sys; sys.path.insert(0, {str(release.lib)!r}); import runpy; "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [release.interpreter.path, "-I", "-S", "-B", "-c", boot, *args]


def exec_release(release: Release, *args: str, module: str) -> OSError:
    """Replace this process with ``python -m <module> *args`` run from ``release``
    (:func:`command`; verify first), stdout and stderr flushed first. Returns only when
    the exec fails, with the error."""
    argv = command(release, *args, module=module)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        return exc


def list_releases(releases_dir: Path) -> list[ReleaseSummary]:
    """Summaries of every entry in ``releases_dir``, sorted by name, from RUNTIME.json only.

    Cheap: no file is hashed (use :func:`verify` before running one). An entry that cannot
    be read is listed as ``corrupt`` with a reason instead of failing the whole list.
    Raises NotFound if ``releases_dir`` is missing, UnsafePath if it is not a directory.
    """
    releases_dir = Path(releases_dir)
    _check_root(releases_dir)
    return [summarize(releases_dir, name) for name in sorted(os.listdir(releases_dir))]


def summarize(releases_dir: Path, name: str) -> ReleaseSummary:
    """The cheap status of ``releases_dir/name`` (see :func:`list_releases`): ``missing``
    when there is no such entry, ``ok`` when its RUNTIME.json reads and hashes to its
    name. Never raises: what cannot be read is ``corrupt``, with the reason."""
    path = Path(releases_dir) / name
    if ".tmp-" in name:
        return ReleaseSummary(name, path, ReleaseStatus.INCOMPLETE)
    if not os.path.lexists(path):
        return ReleaseSummary(name, path, ReleaseStatus.MISSING, reason="not installed")
    try:
        return _summary(name, path)
    except (TenureError, OSError) as e:
        return ReleaseSummary(name, path, ReleaseStatus.CORRUPT, reason=str(e))


def _summary(name: str, path: Path) -> ReleaseSummary:
    """Raises StateCorrupt, UnsafePath, NotFound or OSError for an entry that fails."""
    if not is_release_id(name):
        raise StateCorrupt(f"{name}: not a release id")
    _check_root(path)
    data = _read_small(path / RUNTIME_NAME, RUNTIME_NAME)
    if release_id(data) != name:
        raise StateCorrupt(f"{RUNTIME_NAME} does not hash to the directory name")
    rt = parse_runtime(data)
    return ReleaseSummary(
        name, path, ReleaseStatus.OK, tenure_version=rt.tenure_version,
        source_commit=rt.source_commit,
        contracts=dict(rt.contracts), file_count=len(rt.files), runs_under=rt.interpreter,
    )


# --- filesystem helpers ----------------------------------------------------------------


def _ensure_dir(path: Path) -> None:
    """Create ``path`` (0700) if missing. Raises UnsafePath if it is not a real directory."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    _check_root(path)


def _copy_release(source: Release, dst: Path) -> None:
    """Copy RUNTIME.json, the signature if any and every listed file into new ``dst``.

    Each file is created exclusively and made 0444; :func:`make_durable` flushes them.
    Raises UnsafePath, NotFound, OSError.
    """
    from shutil import copyfileobj  # only installing copies: verifying needs no shutil
    dst.mkdir(mode=0o700)
    names = [RUNTIME_NAME, *([SIGNATURE_NAME] if source.signed else []), *source.runtime.files]
    for d in sorted(source.runtime.dirs):
        (dst / d).mkdir(mode=0o700)
    for rel in names:
        with os.fdopen(open_regular(source.path / rel, rel), "rb") as fin:
            fd = os.open(dst / rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            try:
                with os.fdopen(fd, "wb") as fout:
                    copyfileobj(fin, fout, CHUNK)
                    os.fchmod(fd, RO_FILE)
            except OSError as exc:
                if exc.filename is None:   # a write (a full disk) names no file: say which
                    exc.filename = os.fspath(dst / rel)
                raise

