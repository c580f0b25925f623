"""Draft apps from every source → one :class:`backend.model.Config`.

Invariants of the result: every stack and app name matches tenure's name rule, app names
are unique within a stack, and ``after`` only names apps of the same stack. Names that
had to change are reported as notes. Start order (supervisord ``priority``) becomes
``after``: when the apps of a stack have more than one priority, each app starts after
every app of the next lower priority; apps without a priority (PM2, Procfile) wait for
none and none waits for them. Deterministic: the same drafts in the same order
always give the same config and findings.
"""

from __future__ import annotations

import re

from msgspec import Struct, field
from msgspec.structs import replace

from ..config_values import MAX_EXEC_STRING, NAME_RE, fits_exec
from ..model import UNENDING_STOP_SIGNALS, App, Config, Stack, StopSpec
from .model import Draft, Finding, FindingKind, Origin

__all__ = ["Assembled", "assemble", "clean_name"]

_INVALID = re.compile(r"[^A-Za-z0-9_.-]+")
_MAX_NAME = 64


class Assembled(Struct):
    config: Config
    origins: dict[str, Origin] = field(default_factory=dict)  # "stack/app" → origin
    findings: list[Finding] = field(default_factory=list)


def clean_name(raw: str, fallback: str) -> str:
    """``raw`` made a valid tenure name: runs of other characters become ``-``, it starts
    with a letter or digit, and it is at most 64 characters; ``fallback`` if nothing is
    left, or if most of it is lost (fewer than half of its characters are letters, digits,
    ``_``, ``.`` or ``-``: ``ünï`` would be ``n-``, no longer its name). Pure."""
    raw = raw.strip()
    if 2 * (len(raw) - sum(map(len, _INVALID.findall(raw)))) < len(raw):
        return fallback
    name = _INVALID.sub("-", raw).lstrip("_.-")[:_MAX_NAME]
    return name if NAME_RE.fullmatch(name) else fallback


def assemble(drafts: list[Draft], default_stack: str) -> Assembled:
    """Name, group and order ``drafts``; ``default_stack`` (a valid name) takes the apps
    that came without a stack of their own."""
    out = Assembled(Config(stacks={}))
    stacks: dict[str, list[tuple[App, Draft]]] = {}
    for original in drafts:
        draft = _usable(original, out)
        if draft is None:
            continue
        stack = _stack_name(draft, default_stack, out)
        members = stacks.setdefault(stack, [])
        name = _app_name(draft, {a.name for a, _ in members}, out)
        members.append((replace(draft.app, name=name, stack=stack), draft))
    result: dict[str, Stack] = {}
    for stack, members in sorted(stacks.items()):
        apps = _order(members)
        result[stack] = Stack(name=stack, apps=dict(sorted(apps.items())))
        for app, draft in members:
            out.origins[f"{stack}/{app.name}"] = draft.origin
    out.config = Config(stacks=result)
    return out


def _usable(draft: Draft, out: Assembled) -> Draft | None:
    """``draft`` without what tenure.toml cannot hold, each reported (tenure's config
    refuses it, and `tenure import` would end in INTERNAL): a command no exec could take
    (a NUL character, a blank program name, an argument over the exec limit) drops the
    app; an unusable variable drops the variable; a stop signal that never ends a
    process is replaced by the default one."""
    app = draft.app
    why = _unlaunchable(app)
    if why is not None:
        out.findings.append(Finding(FindingKind.NOT_MAPPED, draft.origin,
                                    f"{why}: app not imported"))
        return None
    bad = {k: "empty name, '=' in the name or a NUL" for k, v in app.env.items()
           if not k or "=" in k or "\0" in k + v}
    bad.update({k: f"over {MAX_EXEC_STRING} bytes, more than Linux execs"
                for k, v in app.env.items() if k not in bad and not fits_exec(f"{k}={v}")})
    for key in sorted(bad):
        out.findings.append(Finding(FindingKind.NOT_MAPPED, draft.origin,
                                    f"env {key!r}: {bad[key]}"))
    stop = app.stop
    if stop.signal in UNENDING_STOP_SIGNALS:
        default = StopSpec().signal
        out.findings.append(Finding(FindingKind.NOT_MAPPED, draft.origin,
                                    f"stop signal SIG{stop.signal} never ends a process: "
                                    f"SIG{default} is used"))
        stop = replace(stop, signal=default)
    if not bad and stop is app.stop:
        return draft
    env = {k: v for k, v in app.env.items() if k not in bad}
    return replace(draft, app=replace(app, env=env, stop=stop))


def _unlaunchable(app: App) -> str | None:
    """Why no exec could start ``app``'s command, or None."""
    if any("\0" in text for text in (*app.command, app.cwd or "")):
        return "has a NUL character"
    if not app.command or not app.command[0].strip():
        return "the program name is empty or blank"
    for i, arg in enumerate(app.command):
        if not fits_exec(arg):
            return f"argument {i} of the command is over {MAX_EXEC_STRING} bytes, more " \
                "than Linux execs"
    return None


def _stack_name(draft: Draft, default_stack: str, out: Assembled) -> str:
    raw = draft.app.stack
    if not raw:
        return default_stack
    name = clean_name(raw, default_stack)
    if name != raw:
        out.findings.append(Finding(FindingKind.NOTE, draft.origin,
                                    f"stack {raw!r} is named {name!r} in tenure.toml"))
    return name


def _app_name(draft: Draft, taken: set[str], out: Assembled) -> str:
    raw = draft.app.name
    base = clean_name(raw, "app")
    name, n = base, 1
    while name in taken:
        n += 1
        suffix = f"-{n}"
        name = base[:_MAX_NAME - len(suffix)] + suffix
    if name != raw:
        out.findings.append(Finding(FindingKind.NOTE, draft.origin,
                                    f"app {raw!r} is named {name!r} in tenure.toml"))
    return name


def _order(members: list[tuple[App, Draft]]) -> dict[str, App]:
    """The stack's apps with ``after`` set from their drafts' priorities; an app without
    one keeps no ``after`` and is in none."""
    levels = sorted({d.priority for _, d in members if d.priority is not None})
    if len(levels) < 2:
        return {a.name: a for a, _ in members}
    names_at = {p: tuple(sorted(a.name for a, d in members if d.priority == p))
                for p in levels}
    apps = {}
    for app, draft in members:
        if draft.priority is None:
            apps[app.name] = app
            continue
        i = levels.index(draft.priority)
        after = names_at[levels[i - 1]] if i > 0 else ()
        apps[app.name] = replace(app, after=after)
    return apps
