"""``tenure import FILE... [-o FILE] [--stack NAME] [--from FORMAT]``: convert supervisord,
PM2 or Procfile setups into tenure.toml (:mod:`backend.importers`). Works on files only;
no daemon is needed."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from protocol.errors import BadRequest, ConfigInvalid

from .exits import Exit

__all__ = ["import_command"]


def import_command(args: Any, out: Callable[..., None]) -> int:
    """Print the config (or write it to ``-o``) and report what was not mapped: on stderr,
    or under ``not_mapped``/``notes`` with ``--json``. Raises BadRequest (``-o`` exists or
    cannot be written, bad ``--stack``, unknown format), ConfigInvalid (a file cannot be
    read, or nothing could be imported)."""
    from backend.importers import FindingKind, SourceFormat, import_files

    if args.output is not None and os.path.lexists(args.output):
        raise _exists(args.output)   # early, before a PM2 file runs node for seconds
    fmt = SourceFormat(args.source_format) if args.source_format else None
    result = import_files([str(p) for p in args.files], args.stack, fmt)
    not_mapped = result.of_kind(FindingKind.NOT_MAPPED)
    notes = result.of_kind(FindingKind.NOTE)
    if not args.json:
        for line in result.report_lines():
            print(line, file=sys.stderr)
    if not result.config.stacks:
        raise ConfigInvalid("nothing to import: no app could be mapped",
                            {"not_mapped": [f.to_wire() for f in not_mapped]})
    if args.output is not None:
        _write(args.output, result.text)
    apps = sum(len(s.apps) for s in result.config.stacks.values())
    summary = {
        "ok": True, "output": None if args.output is None else str(args.output),
        "toml": result.text,
        "stacks": {s.name: sorted(s.apps) for s in result.config.stacks.values()},
        "not_mapped": [f.to_wire() for f in not_mapped],
        "notes": [f.to_wire() for f in notes],
    }
    if args.output is None:
        out(args, summary, result.text.rstrip("\n"))
    else:
        counts = ", ".join(_count(n, what) for n, what in (
            (apps, "app"), (len(result.config.stacks), "stack"),
            (len(not_mapped), "setting not mapped")))
        out(args, summary, f"wrote {args.output} ({counts}); check it with: "
                           f"tenure plan --config {args.output}")
    return Exit.OK


def _write(path: Any, text: str) -> None:
    """Create ``path``, never over a file: one may have appeared since the early check
    (the import can take seconds). Raises BadRequest when it exists or cannot be written
    (no such directory, no access)."""
    from protocol.durable import write_new
    try:
        write_new(path, text.encode(), 0o644)
    except FileExistsError:
        raise _exists(path) from None
    except OSError as e:
        raise BadRequest(f"cannot write {path}: {e.strerror or e}") from None


def _exists(path: Any) -> BadRequest:
    return BadRequest(f"{path} exists; remove it or choose another -o FILE")


def _count(n: int, what: str) -> str:
    word, _, rest = what.partition(" ")
    return f"{n} {word}{'' if n == 1 else 's'}{' ' + rest if rest else ''}"
