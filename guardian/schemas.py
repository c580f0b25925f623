"""The schema gate: a candidate release runs only if it can read the durable state on
disk and the checkpoint the running generation will write, and changes no format in
place. Checked in a handoff's ``checked`` phase (and by ``upgrade --check``), before
the incumbent is drained; a rollback is a handoff too, so an older release is refused
once it can no longer read what a newer one left.

A release declares its formats in its preflight answer (``schemas``: ``reads`` maps
each format to the versions it reads, ``writes`` to the version it writes; see
backend/schemas.py). Formats on disk come from backend.db's ``meta`` table, opened read
only: the file's ``format_version`` and each part's version. Parts are expand-only: a
release that does not know a part never reads its tables, so an unknown part is no
obstacle; a known part at a version it does not read is.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from protocol.durable import read_rows
from protocol.errors import SchemaIncompatible, StateCorrupt

__all__ = ["LEGACY", "check", "declared", "on_disk"]

LEGACY: dict[str, dict[str, Any]] = {
    "reads": {"backend.db": [1], "checkpoint": [1]},
    "writes": {"backend.db": 1, "checkpoint": 1},
}
"""What a release from before declarations reads and writes (format 1 everywhere)."""


def declared(preflight: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A release's declaration from its preflight result (``report``: what the release
    printed; LEGACY when it declares nothing). Raises StateCorrupt for a malformed one."""
    report = preflight.get("report")
    schemas = report.get("schemas") if isinstance(report, dict) else None
    if schemas is None:
        return LEGACY
    if not isinstance(schemas, dict) or not isinstance(schemas.get("reads"), dict) or \
            not isinstance(schemas.get("writes"), dict):
        raise StateCorrupt("the release's preflight declares malformed schemas",
                           {"schemas": schemas})
    return schemas


def on_disk(backend_db: str) -> dict[str, int]:
    """Formats backend.db holds now ({} when there is none yet). Read only; never
    creates or changes the file. Raises StateCorrupt, UnsafePath (a symlink)."""
    try:
        rows = read_rows(backend_db, "SELECT key, value FROM meta")
        if rows is None:
            return {}
        meta = dict(rows)
        out = {"backend.db": int(meta["format_version"])}
        out.update({f"backend.db:{k[5:]}": int(v) for k, v in meta.items()
                    if k.startswith("part:")})
    except (sqlite3.Error, KeyError, ValueError) as exc:
        raise StateCorrupt(f"{backend_db}: cannot read its formats: {exc}",
                           {"path": backend_db}) from None
    return out


def check(candidate: dict[str, dict[str, Any]], disk: dict[str, int],
          incumbent: dict[str, dict[str, Any]] | None) -> None:
    """Raises SchemaIncompatible naming every problem: a format on disk the candidate
    does not read, one it would write at another version (a change in place), and a
    checkpoint format of the incumbent it does not read."""
    reads, writes = candidate["reads"], candidate["writes"]
    problems: list[dict[str, Any]] = []
    for key, version in sorted(disk.items()):
        known = reads.get(key)
        if known is None and key != "backend.db":
            continue                 # a part it does not know: it never reads it
        if known is None or version not in known:
            problems.append({"format": key, "on_disk": version, "reads": known})
    for key, version in sorted(writes.items()):
        if key in disk and disk[key] != version:
            problems.append({"format": key, "on_disk": disk[key], "writes": version})
    if incumbent is not None:
        wrote = incumbent["writes"].get("checkpoint")
        if wrote not in (reads.get("checkpoint") or []):
            problems.append({"format": "checkpoint", "incumbent_writes": wrote,
                             "reads": reads.get("checkpoint")})
    if problems:
        raise SchemaIncompatible(
            f"the candidate cannot take over this state: {_say(problems[0])}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
            {"problems": problems})


def _say(p: dict[str, Any]) -> str:
    if "incumbent_writes" in p:
        return (f"the running generation writes checkpoint format {p['incumbent_writes']}, "
                f"the candidate reads {p['reads']}")
    if "writes" in p:
        return (f"{p['format']} is at version {p['on_disk']} and the candidate would write "
                f"{p['writes']} (formats change only by adding parts)")
    return f"{p['format']} is at version {p['on_disk']}, the candidate reads {p['reads']}"
