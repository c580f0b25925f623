"""Human-readable output of ``tenure inspect``: every field of an instance, labelled and
in a fixed order (the rest as the backend sent them), its command line, environment and
the app's own words neutralised."""

from __future__ import annotations

from .present import (
    colour_for,
    dur,
    fields,
    identity,
    neutralise,
    paint,
    percent,
    size,
    span,
    value,
)
from .render import DEFAULT_LOG_RETENTION, app_status, row_detail, row_state, stored_fds
from .render_backend import owner_link

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Any

__all__ = ["inspect"]


# inspect: these keys in this order, each as (label, formatter); the rest follow as-is
_INSPECT: list[tuple[str, str, Any]] = [
    ("state", "state", lambda r: paint(row_state(r), colour_for(row_state(r)))),
    ("detail", "detail", lambda r: row_detail(r, told=False) or "-"),
    ("status_text", "app status", lambda r: app_status(r["status_text"]) or "-"),
    ("pid", "pid", lambda r: value(r["pid"])),
    ("launch_key", "launch key", lambda r: value(r["launch_key"])),
    ("unrecorded", "owner's record", lambda r: paint(
        "NOT WRITTEN (storage error; watched all the same)", "red") if r["unrecorded"]
     else "written"),
    ("uptime", "uptime", lambda r: dur(r["uptime"])),
    # the owner lost: how long ago it was last heard (a duration, as everywhere)
    ("last_seen_age", "last seen", lambda r: f"{dur(r['last_seen_age'])} ago"),
    ("restarts", "restarts", lambda r: str(r["restarts"])),
    ("ready", "ready", lambda r: value(r["ready"])),
    ("last_outcome", "last outcome", lambda r: value(r["last_outcome"])),
    ("cpu_percent", "cpu", lambda r: percent(r["cpu_percent"])),
    ("rss", "memory", lambda r: size(r["rss"])),
    ("log_dropped", "log lines dropped", lambda r: value(r["log_dropped"])),
    ("log_retention", "log retention", lambda r: size(r["log_retention"])
     if r["log_retention"] else f"{DEFAULT_LOG_RETENTION} (the default)"),
    ("command", "command", lambda r: _shell_words(r["command"])),
    ("restart", "restart policy", lambda r: value(r["restart"])),
    ("cwd", "working directory", lambda r: r["cwd"] or "the owner's"),
    ("ready_kind", "readiness", lambda r: r.get("readiness") or value(r["ready_kind"])),
    ("health", "health check", lambda r: _health(r["health"])),
    ("stop", "stop", lambda r: _stop(r["stop"])),
    ("identity", "runs as", lambda r: identity(r["identity"])),
    ("limits", "limits", lambda r: value(r["limits"])),
    ("last_error", "last error", lambda r: _said(r["last_error"])),
    ("last_exit", "last exit", lambda r: _said(r["last_exit"])),
    ("last_probe", "last failed probe", lambda r: _said(r["last_probe"])),
    ("sockets", "sockets", lambda r: _held_sockets(r["sockets"])),
    ("stored_fds", "stored fds", lambda r: "unknown" if r["stored_fds"] is None else
     stored_fds(r["stored_fds"]) or "-"),
]


def _health(h: dict[str, Any] | None) -> str:
    """``GET http://127.0.0.1:8080/health every 10s (timeout 5s), restart after 3
    failures``, or ``none``."""
    if not h:
        return "none"
    grace = f", none in the first {span(h['grace'])}" if h.get("grace") else ""
    return (f"{h['check']} every {span(h['interval'])} (timeout {span(h['timeout'])}), "
            f"restart after {h['failures']} failure{'s' if h['failures'] != 1 else ''}"
            f"{grace}")


def _held_sockets(socks: list[dict[str, Any]] | None) -> str:
    """``http 127.0.0.1:8080 (queue 0/4096, inode 123, used by s/a/0/3); local
    unix:/run/a.sock (mode 0660, owner -:www, inode 124); ...``;
    ``unknown`` when the owner could not be asked."""
    if socks is None:
        return "unknown"
    out = []
    for s in socks:
        said = [] if s.get("queued") is None else [f"queue {s['queued']}/{s['queue_limit']}"]
        if s.get("mode") is not None:
            said.append(f"mode {s['mode']:04o}")
        if s.get("user") or s.get("group"):
            said.append(f"owner {s.get('user') or '-'}:{s.get('group') or '-'}")
        said.append(f"inode {s['inode']}")
        if s.get("used_by"):
            said.append(f"used by {', '.join(s['used_by'])}")
        out.append(f"{s['name']} {s['listen']} ({', '.join(said)})")
    return "; ".join(out) or "-"


_SHOWN_ELSEWHERE = {"key", "stack", "app", "instance", "generation", "reason", "readiness",
                    "next_start_in"}
_INSPECT_KEYS = {key for key, _, _ in _INSPECT} | _SHOWN_ELSEWHERE
_PAINTED = {"state", "unrecorded"}   # coloured by paint: tenure's own words


def _said(record: dict[str, Any] | None) -> str:
    """A last_error/last_exit/last_probe record: its text and the launch it was."""
    if not record:
        return "-"
    return f"{record['text']} (generation {record['generation']})"


def _shell_words(argv: list[str]) -> str:
    import shlex  # only inspect shows a command line; status loads nothing it does not use
    return shlex.join(argv)


def inspect(r: dict[str, Any]) -> str:
    out = []
    for i in r["instances"]:
        # a command line, an environment, an app's words: never the terminal's controls
        pairs = [(label, fmt(i) if key in _PAINTED else neutralise(fmt(i)))
                 for key, label, fmt in _INSPECT if key in i]
        pairs += [(k.replace("_", " "), neutralise(value(v))) for k, v in i.items()
                  if k not in _INSPECT_KEYS]
        title = f"{i['key']}  (generation {i.get('generation', '-')})"
        out.append(title + "\n" + fields(pairs, indent="  "))
    text = "\n\n".join(out) if out else "no instances"
    link = r.get("owner_link")
    if link is not None and not link["current"]:
        text = owner_link(link) + "\n\n" + text
    return text


def _stop(stop: dict[str, Any] | None) -> str:
    """``SIGTERM, then SIGKILL after 10s``."""
    if not stop:
        return "-"
    sig = str(stop.get("signal", "TERM"))
    sig = sig if sig.startswith("SIG") else f"SIG{sig}"
    out = f"{sig}, then SIGKILL after {span(stop.get('timeout'))}"
    return out
