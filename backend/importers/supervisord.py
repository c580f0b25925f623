"""supervisord ``.conf`` files → draft apps (see docs/config.md, "Coming from supervisord").

The file is read with the INI rules of :mod:`backend.importers.ini`; ``[include] files``
(space-separated globs, relative to the including file, matches read in sorted order) are
merged in, as supervisord does: only the main file's ``[include]`` is followed.
``[program:x]`` becomes an app (:mod:`backend.importers.supervisord_program`),
``[group:x] programs=`` a stack of those programs; the daemon's own sections are reported
as not mapped, except what every program inherits from the daemon: ``[supervisord]
environment``, ``user`` (supervisord drops to it before it starts anything) and, unless
``nodaemon`` is true, ``directory`` and ``umask`` (it changes into the one and sets the
other as it daemonizes). Each is a default for the programs that do not set their own.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from typing import TypeVar

from .identity import account
from .ini import IniDocument, IniError, IniSection
from .model import Context, Origin, SourceResult, read_utf8, source_error
from .supervisord_program import (
    DaemonDefaults,
    ExpansionScope,
    Group,
    read_environment,
    read_program,
)
from .supervisord_values import boolean, expand, integer, list_of_strings, octal

__all__ = ["read_supervisord"]

T = TypeVar("T")

# what supervisord raised for itself and, inherited, for every program it started
_RAISED_LIMITS = {
    "minfds": "supervisord raised its file limit, and every program's, to at least this; "
              "set `limits.nofile` on the apps that need it",
    "minprocs": "supervisord raised its process limit, and every program's, to at least "
                "this; set `limits.nproc` on the apps that need it",
}

_SECTION_REASONS = {
    "supervisord": "settings of the supervisord daemon itself (logging, pid file, "
                   "limits); tenure's daemons need none of them",
    "unix_http_server": "supervisord's control socket; tenure has its own "
                        "(the `tenure` command)",
    "inet_http_server": "supervisord's HTTP control interface; tenure has none",
    "supervisorctl": "settings of supervisorctl; the `tenure` command needs none",
}
# [supervisord] keys that programs inherit: carried over as their defaults
_INHERITED = ("environment", "user", "directory", "umask")
_HOME_NOTE = ("tenure sets HOME, USER and LOGNAME to this user's (supervisord leaves "
              "those it was started with)")
_FOREGROUND = ("supervisord applies it only when it daemonizes, and nodaemon is true: "
               "programs ran with the {} of whatever started supervisord")
_PREFIX_REASONS = {
    "rpcinterface:": "supervisord XML-RPC plugins have no tenure equivalent",
    "ctlplugin:": "supervisorctl plugins have no tenure equivalent",
    "eventlistener:": "event listeners have no tenure equivalent",
    "fcgi-program:": "FastCGI programs (a socket shared by the processes) have no "
                     "tenure equivalent",
}


def read_supervisord(path: str, ctx: Context) -> SourceResult:
    """Read ``path`` and its includes. Raises ConfigInvalid when a file cannot be read or
    is not an INI file, or when ``[include]`` has no ``files``."""
    result = SourceResult()
    doc = _load(path, ctx, result)
    scope = ExpansionScope(environ=dict(ctx.environ), hostname=ctx.hostname)
    scope.daemon_env = _daemon_environment(doc, scope, result)
    scope.daemon = _daemon_defaults(doc, scope, result)
    groups = _groups(doc, scope, result)
    for name, section in doc.sections.items():
        if name.startswith("program:"):
            program = name.split(":", 1)[1].strip()
            result.extend(read_program(doc, section, groups.get(program), scope))
        elif not name.startswith("group:") and name != "include":
            _report_section(doc, section, result)
    return result


def _load(path: str, ctx: Context, result: SourceResult) -> IniDocument:
    doc = IniDocument()
    _read_file(doc, path)
    include = doc.sections.get("include")
    if include is None:
        return doc
    files = doc.get("include", "files")
    if files is None:
        raise source_error(path, include.line, "[include]", "has no 'files' key")
    names: dict[str, str | int] = {"here": _here(path), "host_node_name": ctx.hostname,
                                   **{f"ENV_{k}": v for k, v in ctx.environ.items()}}
    try:
        patterns = expand(files.value, names).split()
    except ValueError as e:
        raise source_error(path, files.line, "[include] files", str(e)) from None
    for pattern in patterns:
        matches = sorted(glob.glob(os.path.join(os.path.dirname(path), pattern)))
        if not matches:
            result.note(Origin(path, files.line, "[include] files"),
                        f"no file matches {pattern!r}")
        for match in matches:
            _read_file(doc, match)
    nested = doc.get("include", "files")
    if nested is not None and nested.file != path:
        result.not_mapped(Origin(nested.file, nested.line, "[include] files"),
                          "supervisord follows [include] only in the main file")
    return doc


def _read_file(doc: IniDocument, path: str) -> None:
    text = read_utf8(path, bom=False)
    try:
        doc.read(text, path)
    except IniError as e:
        raise source_error(path, e.line, "", e.problem) from None


def _here(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def _daemon_environment(doc: IniDocument, scope: ExpansionScope,
                        result: SourceResult) -> dict[str, str]:
    """``[supervisord] environment``: every program inherits it (its own wins)."""
    if "supervisord" not in doc.sections:
        return {}
    value = doc.get("supervisord", "environment")
    if value is None:
        return {}
    return read_environment(value.value, scope.names(_here(value.file)),
                            Origin(value.file, value.line, "[supervisord] environment"),
                            result) or {}


def _daemon_defaults(doc: IniDocument, scope: ExpansionScope,
                     result: SourceResult) -> DaemonDefaults:
    """``[supervisord] user``, ``directory`` and ``umask``: what every program inherits
    from the daemon where it sets none of its own, each with a note saying so, or a
    finding saying why it is not carried over."""
    if "supervisord" not in doc.sections:
        return DaemonDefaults()
    foreground = _nodaemon(doc)
    cwd = _daemon_value(doc, scope, "directory", _absolute, result, foreground)
    umask = _daemon_value(doc, scope, "umask", octal, result, foreground)
    user = _daemon_value(doc, scope, "user", _user_name, result)
    notes = {
        "user": f"supervisord drops to this user before it starts anything: programs "
                f"without their own user get user = {user!r}; {_HOME_NOTE}",
        "directory": f"supervisord changes into it as it daemonizes and programs "
                     f"inherit it: those without their own directory get cwd = {cwd!r}",
        "umask": f"supervisord sets it as it daemonizes and programs inherit it: those "
                 f"without their own umask get umask = \"{umask or 0:04o}\"",
    }
    for key, value in (("user", user), ("directory", cwd), ("umask", umask)):
        found = doc.get("supervisord", key)
        if value is not None and found is not None:
            result.note(Origin(found.file, found.line, f"[supervisord] {key}"), notes[key])
    return DaemonDefaults(user=user, cwd=cwd, umask=umask)


def _nodaemon(doc: IniDocument) -> bool:
    """``[supervisord] nodaemon`` (a value supervisord refuses is reported with the
    section's other keys)."""
    value = doc.get("supervisord", "nodaemon")
    try:
        return value is not None and boolean(value.value)
    except ValueError:
        return False


def _daemon_value(doc: IniDocument, scope: ExpansionScope, key: str,
                  convert: Callable[[str], T], result: SourceResult,
                  foreground: bool = False) -> T | None:
    """``[supervisord] key`` expanded and converted; None when absent, when supervisord
    ignores it in the ``foreground``, or when it cannot be converted (reported)."""
    value = doc.get("supervisord", key)
    if value is None:
        return None
    origin = Origin(value.file, value.line, f"[supervisord] {key}")
    if foreground:
        result.not_mapped(origin, _FOREGROUND.format(key))
        return None
    try:
        return convert(expand(value.value, scope.names(_here(value.file))))
    except ValueError as e:
        result.not_mapped(origin, f"{e}; no program gets it")
        return None


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"every program ran in {value!r}, and tenure needs an absolute "
                         "path: set cwd")
    return value


def _user_name(value: str) -> str:
    found = account(value.strip(), "user")
    if found.name is None:
        raise ValueError(f"every program ran as {value.strip()!r}, but {found.problem}")
    return found.name


def _groups(doc: IniDocument, scope: ExpansionScope,
            result: SourceResult) -> dict[str, Group]:
    """Program name → its ``[group:x]``. A group's priority orders whole groups in
    supervisord; tenure stacks start independently, so it is reported."""
    groups: dict[str, Group] = {}
    for name, section in doc.sections.items():
        if not name.startswith("group:"):
            continue
        group = name.split(":", 1)[1].strip()
        for key in doc.keys(name):
            value = doc.get(name, key)
            assert value is not None
            origin = Origin(value.file, value.line, f"[{name}] {key}")
            if key == "programs":
                try:
                    programs = list_of_strings(expand(value.value,
                                                      scope.names(_here(value.file))))
                except ValueError as e:
                    result.not_mapped(origin, str(e))
                    continue
                _add_members(groups, programs, Group(group, origin), result)
                _unknown_programs(doc, programs, origin, result)
            elif key == "priority":
                _group_priority(value.value, origin, result)
            else:
                result.not_mapped(origin, "no tenure equivalent")
        if doc.get(name, "programs") is None:
            result.not_mapped(Origin(section.file, section.line, f"[{name}]"),
                              "a group without 'programs'")
    return groups


def _add_members(groups: dict[str, Group], programs: list[str], group: Group,
                 result: SourceResult) -> None:
    """supervisord runs a program listed in two groups twice; tenure runs it once, in
    the first group."""
    for program in programs:
        first = groups.setdefault(program, group)
        if first.name != group.name:
            result.not_mapped(group.origin, f"{program} is already in [group:{first.name}]"
                              "; it is imported there only")


def _unknown_programs(doc: IniDocument, programs: list[str], origin: Origin,
                      result: SourceResult) -> None:
    for program in programs:
        if f"program:{program}" not in doc.sections:
            result.not_mapped(origin, f"names no [program:{program}]")


def _group_priority(value: str, origin: Origin, result: SourceResult) -> None:
    try:
        integer(value)
    except ValueError as e:
        result.not_mapped(origin, str(e))
        return
    result.not_mapped(origin, "orders whole groups; tenure starts each stack on its own "
                              "(run `tenure stack start` in the order you need)")


def _report_section(doc: IniDocument, section: IniSection, result: SourceResult) -> None:
    """A whole section without a tenure equivalent: one finding, at its header."""
    reason = _SECTION_REASONS.get(section.name)
    if reason is None:
        reason = next((r for p, r in _PREFIX_REASONS.items()
                       if section.name.startswith(p)), "not a section supervisord knows")
    keys = [k for k in doc.keys(section.name)
            if not (section.name == "supervisord" and k in _INHERITED)]
    if section.name == "supervisord":
        for key in [k for k in keys if k in _RAISED_LIMITS]:
            keys.remove(key)
            result.not_mapped(Origin(section.file, section.line, f"[supervisord] {key}"),
                              _RAISED_LIMITS[key])
        if not keys:
            return
    shown = f" ({', '.join(keys)})" if keys else ""
    result.not_mapped(Origin(section.file, section.line, f"[{section.name}]"),
                      reason + shown)
