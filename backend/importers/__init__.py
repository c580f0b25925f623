"""``tenure import``: supervisord, PM2 and Procfile setups → tenure.toml.

::

    import_files(paths, stack)            # → ImportResult(config, text, findings)
      read_supervisord / read_pm2 / read_procfile   one file → Drafts + Findings
      assemble                            names, stacks, ``after`` → Config
      render_toml                         Config → text
      parse_config(text)                  the check `tenure plan` makes, must give the
                                          same config back

The output is deterministic (sorted, defaults left out) and always passes
:func:`backend.config.parse_config`. Everything that could not be carried over is a
:class:`Finding` (``not_mapped``), as is everything carried over with a caveat
(``note``); docs/config.md ("Coming from ...") lists the mappings.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from enum import StrEnum

from msgspec import Struct

from protocol.errors import BadRequest, ConfigInvalid, Internal

from ..config import canonical_form, parse_config
from ..config_values import NAME_RE
from ..model import Config
from .assemble import assemble, clean_name
from .model import Context, Finding, FindingKind, Origin, SourceResult
from .pm2 import read_pm2
from .procfile import read_procfile
from .supervisord import read_supervisord
from .toml_writer import render_toml

__all__ = ["Context", "Finding", "FindingKind", "ImportResult", "SourceFormat",
           "default_stack", "detect_format", "import_files"]


class SourceFormat(StrEnum):
    SUPERVISORD = "supervisord"
    PM2 = "pm2"
    PROCFILE = "procfile"


_READERS: dict[SourceFormat, Callable[[str, Context], SourceResult]] = {
    SourceFormat.SUPERVISORD: read_supervisord,
    SourceFormat.PM2: read_pm2,
    SourceFormat.PROCFILE: read_procfile,
}
_PM2_SUFFIXES = (".config.js", ".config.cjs", ".config.mjs", ".json")


class ImportResult(Struct, frozen=True):
    config: Config
    text: str
    findings: tuple[Finding, ...]

    def of_kind(self, kind: FindingKind) -> list[Finding]:
        return [f for f in self.findings if f.kind is kind]

    def report_lines(self) -> list[str]:
        """The report as `tenure import` prints it: what was not mapped, then notes."""
        return [f"not mapped: {f}" for f in self.of_kind(FindingKind.NOT_MAPPED)] + \
            [f"note: {f}" for f in self.of_kind(FindingKind.NOTE)]


def detect_format(path: str) -> SourceFormat | None:
    """The format a file name implies: ``Procfile``/``Procfile.*``; ``*.config.js`` (also
    ``.cjs``/``.mjs``), ``ecosystem*.js`` or ``*.json`` for PM2; ``*.conf``/``*.ini`` for
    supervisord. None when the name says nothing."""
    name = os.path.basename(path)
    if name == "Procfile" or name.startswith("Procfile."):
        return SourceFormat.PROCFILE
    if name.endswith(_PM2_SUFFIXES) or (name.startswith("ecosystem")
                                        and name.endswith((".js", ".cjs", ".mjs"))):
        return SourceFormat.PM2
    if name.endswith((".conf", ".ini")):
        return SourceFormat.SUPERVISORD
    return None


def default_stack(paths: Sequence[str]) -> str:
    """The stack for apps without a group of their own when ``--stack`` is not given: the
    name of the first file's directory (a Procfile or ecosystem file sits at the root of
    its project) made a valid name, or ``imported`` when that leaves nothing or too little
    of it (:func:`backend.importers.assemble.clean_name`)."""
    return clean_name(_directory_name(paths), "imported")


def _directory_name(paths: Sequence[str]) -> str:
    return os.path.basename(os.path.dirname(os.path.abspath(paths[0])))


def _default_stack_note(paths: Sequence[str], name: str,
                        found: SourceResult) -> list[Finding]:
    """A note when the default stack's name is not its directory's, and an app uses it."""
    raw = _directory_name(paths)
    if raw in ("", name) or all(d.app.stack for d in found.drafts):
        return []
    return [Finding(FindingKind.NOTE, Origin(paths[0], None, ""),
                    f"stack {raw!r} (the name of the file's directory) is named {name!r} "
                    "in tenure.toml; --stack NAME chooses another")]


def import_files(paths: Sequence[str], stack: str | None = None,
                 source_format: SourceFormat | None = None,
                 ctx: Context | None = None) -> ImportResult:
    """Convert ``paths`` into one config. Raises BadRequest for an invalid ``stack`` or a
    file whose format cannot be told from its name (and none is given), ConfigInvalid
    when a file cannot be read or parsed, and Internal if the text it wrote would not
    parse back to the same config (a bug)."""
    if not paths:
        raise BadRequest("give at least one file to import")
    if stack is not None and not NAME_RE.fullmatch(stack):
        raise BadRequest(f"--stack {stack!r}: use 1-64 letters, digits, '_', '.' or '-', "
                         "starting with a letter or digit")
    ctx = ctx or Context()
    found = SourceResult()
    for path in paths:
        fmt = source_format or detect_format(path)
        if fmt is None:
            raise BadRequest(f"{path}: cannot tell its format from the name; give "
                             "--from supervisord, pm2 or procfile")
        found.extend(_READERS[fmt](path, ctx))
    default = stack or default_stack(paths)
    assembled = assemble(found.drafts, default)
    if stack is None:
        assembled.findings.extend(_default_stack_note(paths, default, found))
    findings = sorted(set(found.findings + assembled.findings), key=Finding.sort_key)
    header = ["Written by `tenure import` from: " + ", ".join(paths),
              "Review what it reported as not mapped, then: tenure plan --config FILE"]
    text = render_toml(assembled.config, assembled.origins, header)
    _check(text, assembled.config)
    return ImportResult(assembled.config, text, tuple(findings))


def _check(text: str, config: Config) -> None:
    """The written text must pass `tenure plan`'s parser and mean exactly ``config``."""
    try:
        parsed = parse_config(text, "<tenure import>")
    except ConfigInvalid as e:
        raise Internal(f"tenure import wrote a config that does not validate: {e.msg}",
                       {"text": text}) from None
    if canonical_form(parsed) != canonical_form(config):
        raise Internal("tenure import wrote a config that does not read back the same",
                       {"text": text})
