"""Procfiles → draft apps (see docs/config.md, "Coming from a Procfile").

A Procfile is one ``name: command`` per line (names of letters, digits, ``_`` and ``-``;
blank lines and ``#`` comments are skipped), as Heroku, foreman and honcho read it; a
leading UTF-8 byte order mark, as some Windows editors write, is skipped. Every line
becomes an app of the ``--stack`` stack, run in the Procfile's directory and restarted
whenever it exits, as on Heroku. Heroku, foreman and honcho run the command
through a shell; tenure runs it through ``sh -c`` only when it uses shell syntax (pipes,
redirections, variables, globs, ``&&``, ...), and otherwise splits it into words itself,
so that the app's own process receives tenure's signals.
"""

from __future__ import annotations

import os
import re
import shlex

from ..model import App, RestartMode
from .model import Context, Draft, Origin, SourceResult, read_utf8
from .policy import needs_shell

__all__ = ["read_procfile"]

_LINE = re.compile(r"([A-Za-z0-9_-]+):\s*(.+)")
_PORT = re.compile(r"\$(?:PORT\b|\{PORT[}:-])")


def read_procfile(path: str, ctx: Context) -> SourceResult:
    """Draft apps of the Procfile ``path``. Raises ConfigInvalid when it cannot be read.
    ``ctx`` is unused: a Procfile depends on nothing but itself."""
    del ctx
    lines = read_utf8(path).splitlines()
    result = SourceResult()
    cwd = os.path.dirname(os.path.abspath(path))
    if os.path.exists(os.path.join(cwd, ".env")):   # never read: it may hold secrets
        result.not_mapped(Origin(os.path.join(cwd, ".env"), None, ".env"), (
            "foreman, honcho and `heroku local` load it into every process; the import "
            "does not read it: put what the apps need into their env"))
    seen: dict[str, int] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE.fullmatch(line.rstrip())
        if m is None:
            result.not_mapped(Origin(path, lineno, ""), "not a 'name: command' line")
            continue
        name, command = m.group(1), m.group(2).strip()
        origin = Origin(path, lineno, name)
        if name in seen:
            result.not_mapped(origin, f"{name!r} is already defined on line {seen[name]}")
            continue
        seen[name] = lineno
        _process(name, command, origin, cwd, result)
    return result


def _process(name: str, command: str, origin: Origin, cwd: str,
             result: SourceResult) -> None:
    if name == "release":
        result.not_mapped(origin, "Heroku runs the release process once per deploy, "
                                  "not as a service: run it before `tenure apply`")
        return
    try:
        argv = ("sh", "-c", command) if needs_shell(command) else tuple(shlex.split(command))
    except ValueError as e:
        result.not_mapped(origin, f"cannot split the command: {e}")
        return
    if _PORT.search(command):
        result.note(origin, "uses $PORT, which Heroku and foreman set and tenure does "
                            "not: add PORT to the app's env")
    app = App(name=name, stack="", command=argv, cwd=cwd, restart=RestartMode.ALWAYS)
    result.drafts.append(Draft(app, origin))
