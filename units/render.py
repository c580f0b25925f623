"""Deterministic rendering of :class:`~units.model.ServiceSpec` into systemd units and
launchd plists. Same spec in, same bytes out; nothing here reads the clock or the host.

systemd escaping, per systemd.unit(5)/systemd.service(5):

- ``%`` starts a specifier in every value we write, so it is doubled everywhere.
- ``ExecStart=`` words are unquoted and C-unescaped, and ``$`` starts a variable
  substitution: an argument with whitespace, a quote or a backslash is written in double
  quotes with ``\\`` and ``"`` backslash-escaped, and ``$`` is doubled. ``$`` in the
  executable path is refused (the path is not substituted, so ``$$`` would stay literal),
  and so are a quote, a backslash or a trailing ``/`` there: systemd refuses to load a
  unit whose executable name has them, however they are escaped.
- ``Environment=`` assignments are always double-quoted, ``\\`` and ``"`` escaped; ``$``
  has no meaning there.
- A newline, NUL or any other control character cannot be represented in a unit line (or
  a plist string) and is refused with BadRequest, as is leading/trailing whitespace or a
  trailing backslash in a plain value (systemd strips the first, continues lines on the
  second).

Golden files: ``python -m units.render --regen-golden tests/golden/units`` rewrites them
from :data:`units.testing.GOLDEN_INSTALLATIONS`; tests only compare.
"""

from __future__ import annotations

import argparse
import plistlib
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from protocol.errors import BadRequest

from .model import ServiceSpec

__all__ = ["exec_word", "plist_name", "quote_env", "render_launchd", "render_systemd"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NEEDS_QUOTES = re.compile(r"[\s\"'\\;]")
_EXEC_REFUSED = re.compile(r"[$\"'\\]")  # systemd's string_is_safe(), and '$'
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@-]+\.(service|target|socket|mount|path)\Z")
_WORD = re.compile(r"[A-Za-z0-9_.:-]+\Z")
HEADER = "# Rendered by tenure (units.render) from units.model; edit the model, not this file."


def _checked(value: str, what: str) -> str:
    """Raises BadRequest for a control character (newline, NUL, ...) in ``value``."""
    if _CONTROL.search(value):
        raise BadRequest(f"{what} contains a control character (newline, NUL, ...) that a "
                         f"unit file or plist cannot represent: {value!r}", {"field": what})
    return value


def _plain(value: str, what: str) -> str:
    """A value systemd takes verbatim except for specifiers. Raises BadRequest."""
    _checked(value, what)
    if value != value.strip() or value.endswith("\\") or not value:
        raise BadRequest(f"{what} cannot be empty, start or end with whitespace, or end "
                         f"with a backslash: {value!r}", {"field": what})
    return value.replace("%", "%%")


def _word(value: str, what: str, pattern: re.Pattern[str] = _WORD) -> str:
    """A setting value from a closed vocabulary (unit names, modes). Raises BadRequest."""
    if not pattern.match(value):
        raise BadRequest(f"{what} is not a valid value: {value!r}", {"field": what})
    return value


def exec_word(arg: str, *, executable: bool = False) -> str:
    """One ``ExecStart=`` word. Raises BadRequest (control character; for the executable:
    a relative path, a directory path or one systemd refuses, see :func:`_executable`)."""
    _checked(arg, "ExecStart")
    if executable:
        _executable(arg)
    body = arg.replace("%", "%%").replace("$", "$$")
    if arg and not _NEEDS_QUOTES.search(arg):
        return body
    return '"' + body.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _executable(arg: str) -> None:
    """Raises BadRequest unless ``arg`` is an executable path systemd loads: absolute, not
    ending in ``/`` ("specifies a directory"), without ``$`` (not substituted there) and
    without a quote or backslash, which systemd refuses in an executable name even when
    escaped ("contains special characters": the unit would not load at all)."""
    if not arg.startswith("/") or arg.endswith("/") or _EXEC_REFUSED.search(arg):
        raise BadRequest("the executable must be an absolute path to a file, without '$', "
                         f"quotes or backslashes (systemd cannot run it): {arg!r}",
                         {"field": "ExecStart"})


def quote_env(key: str, value: str) -> str:
    """``"KEY=value"`` for ``Environment=``. Raises BadRequest (bad key, control char)."""
    if not _ENV_KEY.match(key):
        raise BadRequest(f"environment name {key!r} is not a valid variable name",
                         {"field": "Environment"})
    _checked(value, f"Environment {key}")
    text = f"{key}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{text}"'


def _units(names: Iterable[str], what: str) -> str:
    return " ".join(_word(n, what, _UNIT_NAME) for n in names)


def _unit_section(spec: ServiceSpec) -> list[str]:
    lines = ["[Unit]", f"Description={_plain(spec.description, 'Description')}"]
    for key, names in (("After", spec.after), ("Wants", spec.wants),
                       ("Requires", spec.requires)):
        if names:
            lines.append(f"{key}={_units(names, key)}")
    if spec.start_limit_interval_sec is not None:
        lines.append(f"StartLimitIntervalSec={int(spec.start_limit_interval_sec)}")
    return lines


def _service_section(spec: ServiceSpec) -> list[str]:
    if not spec.exec_start:
        raise BadRequest("ExecStart needs at least the executable", {"field": "ExecStart"})
    words = [exec_word(spec.exec_start[0], executable=True)]
    words += [exec_word(a) for a in spec.exec_start[1:]]
    lines = ["[Service]", f"Type={_word(spec.type, 'Type')}"]
    if spec.type == "notify":
        lines.append(f"NotifyAccess={_word(spec.notify_access, 'NotifyAccess')}")
    lines += [f"ExecStart={' '.join(words)}",
              f"WorkingDirectory={_plain(spec.working_directory, 'WorkingDirectory')}"]
    lines += [f"Environment={quote_env(k, v)}" for k, v in spec.environment]
    if spec.user is not None:
        lines.append(f"User={_word(spec.user, 'User')}")
    if spec.group is not None:
        lines.append(f"Group={_word(spec.group, 'Group')}")
    lines.append(f"Restart={_word(spec.restart, 'Restart')}")
    if spec.restart_sec is not None:
        lines.append(f"RestartSec={int(spec.restart_sec)}")
    lines += [
        f"TimeoutStartSec={int(spec.timeout_start_sec)}",
        f"TimeoutStopSec={int(spec.timeout_stop_sec)}",
        f"KillMode={_word(spec.kill_mode, 'KillMode')}",
        f"KillSignal={_word(spec.kill_signal, 'KillSignal')}",
        f"SendSIGKILL={'yes' if spec.send_sigkill else 'no'}",
        f"OOMPolicy={_word(spec.oom_policy, 'OOMPolicy')}",
        f"Delegate={'yes' if spec.delegate else 'no'}",
    ]
    if spec.limit_nofile is not None:
        lines.append(f"LimitNOFILE={int(spec.limit_nofile)}")
    return lines


def render_systemd(spec: ServiceSpec) -> str:
    """The unit file text for ``spec``, ending in a newline. Raises BadRequest for a value
    that cannot be represented (see the module docstring)."""
    comment = [f"# {_checked(line, 'comment')}".rstrip() for line in spec.comment]
    lines = [HEADER, *comment, "", *_unit_section(spec), "", *_service_section(spec), "",
             "[Install]", f"WantedBy={_units([spec.wanted_by], 'WantedBy')}"]
    return "\n".join(lines) + "\n"


def plist_name(spec: ServiceSpec) -> str:
    """``dev.tenure.owner.plist`` for the owner's label. Raises BadRequest."""
    return f"{_word(spec.label, 'Label')}.plist"


def render_launchd(spec: ServiceSpec) -> bytes:
    """The launchd job plist (XML, sorted keys) for ``spec``. Raises BadRequest."""
    for value in (*spec.exec_start, *(v for _, v in spec.environment), spec.stdout_path,
                  spec.stderr_path, spec.working_directory):
        _checked(value, spec.label)
    for key, value in spec.environment:
        quote_env(key, value)  # the same name and value rules as the systemd rendering
    env = dict(spec.environment)
    job: dict[str, Any] = {
        "Label": _word(spec.label, "Label"),
        "ProgramArguments": list(spec.exec_start),
        "EnvironmentVariables": env,
        "WorkingDirectory": spec.working_directory,
        "KeepAlive": spec.keep_alive,
        "RunAtLoad": spec.run_at_load,
        "StandardOutPath": spec.stdout_path,
        "StandardErrorPath": spec.stderr_path,
        "ExitTimeOut": int(spec.timeout_stop_sec),
        "ProcessType": _word(spec.process_type, "ProcessType"),
    }
    if spec.abandon_process_group:
        job["AbandonProcessGroup"] = True
    if spec.user is not None:
        job["UserName"] = _word(spec.user, "UserName")
    if spec.group is not None:
        job["GroupName"] = _word(spec.group, "GroupName")
    return plistlib.dumps(job, fmt=plistlib.FMT_XML, sort_keys=True)


def regen_golden(directory: Path) -> list[Path]:
    """Rewrite every golden file under ``directory``; returns the paths written."""
    from .testing import golden_files  # the canonical inputs live with the test helpers

    written = []
    for rel, data in sorted(golden_files().items()):
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m units.render",
                                 description="render tenure's unit files and plists")
    ap.add_argument("--regen-golden", type=Path, metavar="DIR", required=True,
                    help="rewrite the golden files (tests/golden/units) from the model")
    args = ap.parse_args(argv)
    for path in regen_golden(args.regen_golden):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
