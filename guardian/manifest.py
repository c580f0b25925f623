"""RUNTIME.json: the manifest of a sealed release, its canonical form and its strict reader.

A release id is the sha256 (hex) of the canonical bytes of RUNTIME.json. The file on disk
must *be* those canonical bytes, so the id can be recomputed from the file alone and any
re-encoding (key order, spacing, escapes, duplicate keys) is detected as corruption.

The reader is strict about what it needs and forgiving about extras: a missing or
mistyped required field, an unknown ``format`` or an unsafe file path raises
:class:`~protocol.errors.StateCorrupt`; unknown top-level keys are ignored with a debug
line (they are still covered by the id).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from protocol import layout
from protocol.errors import StateCorrupt
from protocol.handover import OWNER_CONTRACTS

__all__ = [
    "DEFAULT_CONTRACTS",
    "FORMAT",
    "RUNTIME_NAME",
    "SIGNATURE_NAME",
    "Interpreter",
    "Runtime",
    "canonical_json",
    "is_release_id",
    "is_safe_relpath",
    "parse_runtime",
    "release_id",
]

log = logging.getLogger(__name__)

FORMAT = 1
RUNTIME_NAME = "RUNTIME.json"
SIGNATURE_NAME = "RUNTIME.json.sig"
LIB_PREFIX = "lib/"
DEFAULT_CONTRACTS: Mapping[str, int] = OWNER_CONTRACTS

_HEX64 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_KNOWN_KEYS = frozenset(
    {"format", "tenure_version", "source_commit", "interpreter", "files", "contracts"}
)


def canonical_json(obj: Any) -> bytes:
    """The one byte encoding of ``obj`` that ids and signatures are computed over.

    Raises ValueError for NaN/Infinity (not JSON) and TypeError for non-JSON values.
    """
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def release_id(runtime_bytes: bytes) -> str:
    """sha256 hex of the canonical RUNTIME.json bytes. Never raises."""
    return hashlib.sha256(runtime_bytes).hexdigest()


def is_release_id(name: object) -> bool:
    """True when ``name`` has the shape of a release id (64 lowercase hex digits)."""
    return layout.is_release_id(name)


@dataclass(frozen=True)
class Interpreter:
    """The base interpreter a release runs under: resolved real path, version, sha256."""

    path: str
    version: str
    sha256: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "version": self.version, "sha256": self.sha256}


@dataclass(frozen=True)
class Runtime:
    """The parsed content of RUNTIME.json. ``files`` maps ``lib/...`` paths to sha256 hex."""

    tenure_version: str
    source_commit: str | None
    interpreter: Interpreter
    files: Mapping[str, str]
    contracts: Mapping[str, int]
    format: int = FORMAT

    @functools.cached_property
    def dirs(self) -> frozenset[str]:
        """Every directory the listed files are in, below the release root."""
        return directories(self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "tenure_version": self.tenure_version,
            "source_commit": self.source_commit,
            "interpreter": self.interpreter.to_json(),
            "files": dict(self.files),
            "contracts": dict(self.contracts),
        }

    def encode(self) -> bytes:
        """Canonical RUNTIME.json bytes. Raises StateCorrupt if a field would not re-parse."""
        data = canonical_json(self.to_json())
        parse_runtime(data)
        return data


def parse_runtime(data: bytes) -> Runtime:
    """Parse and check RUNTIME.json bytes.

    Raises StateCorrupt (``data["field"]`` names the culprit when there is one) when the
    bytes are not UTF-8 JSON, not in canonical form, of an unknown format, or miss or
    mistype a required field. Never raises anything else.
    """
    try:
        obj = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise StateCorrupt(f"{RUNTIME_NAME} is not JSON: {e}", {"file": RUNTIME_NAME}) from e
    if not isinstance(obj, dict):
        raise _corrupt("top level is not an object", "")
    fmt = obj.get("format")
    if type(fmt) is not int:
        raise _corrupt("format is missing or not an integer", "format")
    if fmt != FORMAT:
        raise _corrupt(f"unknown format {fmt} (this build reads {FORMAT})", "format")
    try:
        again = canonical_json(obj)
    except (ValueError, TypeError, RecursionError) as e:  # e.g. a lone surrogate escape
        raise _corrupt(f"cannot re-encode: {e}", "") from e
    if again != data:
        raise _corrupt("not in canonical form", "")
    for key in sorted(obj.keys() - _KNOWN_KEYS):
        log.debug("%s: ignoring unknown key %r", RUNTIME_NAME, key)
    runtime = Runtime(
        format=fmt,
        tenure_version=_nonempty_str(obj, "tenure_version"),
        source_commit=_source_commit(obj),
        interpreter=_interpreter(obj.get("interpreter")),
        files=_files(obj.get("files")),
        contracts=_contracts(obj.get("contracts")),
    )
    _check_no_file_dir_clash(runtime)
    return runtime


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _corrupt(msg: str, field: str) -> StateCorrupt:
    data: dict[str, Any] = {"file": RUNTIME_NAME}
    if field:
        data["field"] = field
    return StateCorrupt(f"{RUNTIME_NAME}: {msg}", data)


def _nonempty_str(obj: Mapping[str, Any], key: str, where: str = "") -> str:
    value = obj.get(key)
    field = f"{where}{key}"
    if not isinstance(value, str) or not value:
        raise _corrupt(f"{field} is missing or not a non-empty string", field)
    return value


def _source_commit(obj: Mapping[str, Any]) -> str | None:
    if "source_commit" not in obj:
        raise _corrupt("source_commit is missing", "source_commit")
    value = obj["source_commit"]
    if value is None:
        return None
    if not isinstance(value, str) or _COMMIT.fullmatch(value) is None:
        raise _corrupt("source_commit is not null or a hex commit id", "source_commit")
    return value


def _interpreter(value: Any) -> Interpreter:
    if not isinstance(value, dict):
        raise _corrupt("interpreter is missing or not an object", "interpreter")
    path = _nonempty_str(value, "path", "interpreter.")
    if not path.startswith("/") or "\0" in path:
        raise _corrupt("interpreter.path is not an absolute path", "interpreter.path")
    digest = value.get("sha256")
    if not isinstance(digest, str) or _HEX64.fullmatch(digest) is None:
        raise _corrupt("interpreter.sha256 is not a sha256 hex digest", "interpreter.sha256")
    return Interpreter(
        path=path, version=_nonempty_str(value, "version", "interpreter."), sha256=digest
    )


def _files(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not value:
        raise _corrupt("files is missing, empty or not an object", "files")
    out: dict[str, str] = {}
    for rel, digest in value.items():
        if not is_safe_relpath(rel) or not rel.startswith(LIB_PREFIX):
            raise _corrupt(f"files: unsafe or misplaced path {rel!r}", "files")
        if not isinstance(digest, str) or _HEX64.fullmatch(digest) is None:
            raise _corrupt(f"files: {rel!r} has no sha256 hex digest", "files")
        out[rel] = digest
    return out


def directories(files: Iterable[str]) -> frozenset[str]:
    """Every directory above the relative paths ``files`` (``a/b/c`` gives ``a`` and
    ``a/b``); each is walked up only until a directory already found."""
    out: set[str] = set()
    for rel in files:
        d = rel.rpartition("/")[0]
        while d and d not in out:
            out.add(d)
            d = d.rpartition("/")[0]
    return frozenset(out)


def _check_no_file_dir_clash(runtime: Runtime) -> None:
    clash = sorted(runtime.dirs & runtime.files.keys())
    if clash:
        raise _corrupt(f"files: {clash[0]!r} is both a file and a directory", "files")


def _contracts(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise _corrupt("contracts is missing or not an object", "contracts")
    out: dict[str, int] = {}
    for name, version in value.items():
        if not name or type(version) is not int or version < 1:
            raise _corrupt(f"contracts: {name!r} needs a positive integer version", "contracts")
        out[name] = version
    return out


def is_safe_relpath(rel: Any) -> bool:
    """True for a normalised relative POSIX path that cannot leave its root.

    No empty, ``.`` or ``..`` components, no leading ``/``, no NUL or backslash.
    """
    if not isinstance(rel, str) or not rel or "\0" in rel or "\\" in rel:
        return False
    if rel.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))
