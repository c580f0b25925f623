"""Socket activation in the backend: plan-time checks, what a launch asks the owner for,
and which held sockets and fd stores to let go of.

The owner holds the sockets (owner.sockets) and the fd stores (owner.fdstore); the backend
only declares them in each launch and closes what the applied config no longer names,
once no live launch uses it (:func:`sweep`): at the end of every operation, when a
generation starts, and when a process ends that may have been the last user of such a
socket (:func:`sweep_due`). Everything it needs is in the owner's ``sockets.list``, so a
new backend generation (handoff or recovery) knows it without any checkpoint of its own.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from protocol.errors import Conflict, NotFound, TenureError
from protocol.listen import ListenAddress, parse_listen
from protocol.sockets import unix_live

from .config import config_error
from .config_lines import KeyPath
from .config_sockets import claims
from .model import App, Config

__all__ = ["CAPABILITY", "Swept", "check_sockets", "held_key", "launch_sockets",
           "needs_sockets", "retune", "retuned", "stale", "sweep", "sweep_due", "unnamed"]

log = logging.getLogger("tenure.backend")

CAPABILITY = {"sockets": 1, "socketUpdate": 1}
Fail = Callable[[KeyPath, str], NoReturn]


def needs_sockets(config: Config) -> bool:
    return any(a.sockets or a.fd_store_max for a in config.apps())


def held_key(app: App, name: str, listen: str) -> str:
    """The key the owner holds a socket of ``app`` under (owner.sockets.socket_key)."""
    return f"{app.stack}/{app.name}/{name}@{listen}"


def launch_sockets(app: App) -> dict[str, Any]:
    """The ``sockets`` and ``fd_store_max`` launch parameters (only when set)."""
    out: dict[str, Any] = {}
    if app.sockets:
        out["sockets"] = [s.to_wire() for s in app.sockets]
    if app.fd_store_max:
        out["fd_store_max"] = app.fd_store_max
    return out


def check_sockets(config: Config, text: str, capabilities: Mapping[str, Any],
                  held: list[dict[str, Any]], owner_uid: int | None = None) -> None:
    """Raises ConfigInvalid, with the line, for a config with sockets or an fd store that
    the owner cannot serve (it predates them) and for a socket address that cannot be
    bound now: in use by another process, not an address of this host, a unix socket
    directory that does not exist, or, when this backend runs as the owner's user
    (``owner_uid``), one that user may not create a file in. An address the owner
    already holds for the same app and name is fine; one it holds for another is
    reported (it frees when that app stopped and the next apply closed it)."""
    def fail(path: KeyPath, problem: str) -> NoReturn:
        raise config_error(text, config.source, path, problem)

    if not needs_sockets(config):
        return
    if capabilities.get("sockets") != CAPABILITY["sockets"]:
        app = next(a for a in config.apps() if a.sockets or a.fd_store_max)
        key = "sockets" if app.sockets else "fd_store_max"
        fail(("stacks", app.stack, "apps", app.name, key),
             "the running owner predates socket activation (sockets@1); it gets it when "
             "it is next restarted with this release")
    by_key = {h["key"]: h for h in held}
    held_addrs = [(parse_listen(h["listen"]), h["key"]) for h in held]
    for app in config.apps():
        for s in app.sockets:
            path: KeyPath = ("stacks", app.stack, "apps", app.name, "sockets", s.name,
                             "listen")
            if held_key(app, s.name, s.listen) in by_key:
                continue
            addr = parse_listen(s.listen)
            for other, key in held_addrs:
                if claims(addr, other):
                    fail(path, _held_elsewhere(app, s.listen, by_key[key]))
            _try_bind(addr, path, fail, owner_uid)


def _held_elsewhere(app: App, listen: str, held: Mapping[str, Any]) -> str:
    """Why ``listen`` cannot be bound now: the owner holds ``held`` (a socket of this
    app under another name or address, or of another app) on an address it claims."""
    if (held.get("stack"), held.get("app")) != (app.stack, app.name):
        return (f"{listen} is held by the owner for {held['key']}: remove it there first "
                "(it is closed once that app stopped)")
    return (f"{listen} overlaps {held.get('listen')}, which the owner holds for this "
            f"app's socket {held.get('name')!r}: the new socket cannot be bound while that "
            "one is held, so the move takes two applies: first give the socket an address "
            "that does not overlap (or remove it), then this one")


def _try_bind(addr: ListenAddress, path: KeyPath, fail: Fail,
              owner_uid: int | None = None) -> None:
    if addr.is_unix:
        _check_unix(addr, path, fail, owner_uid)
        return
    with socket.socket(addr.family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if addr.family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            s.bind(addr.sockaddr)
        except OSError as e:
            if e.errno == errno.EACCES:
                return  # a privileged port: the owner may be root, it decides at launch
            if e.errno == errno.EADDRINUSE:
                fail(path, f"{addr} is in use by another process on this host")
            fail(path, f"cannot bind {addr}: {e.strerror or e}")


def _check_unix(addr: ListenAddress, path: KeyPath, fail: Fail,
                owner_uid: int | None = None) -> None:
    parent = os.path.dirname(addr.path)
    if not os.path.isdir(parent):
        fail(path, f"directory {parent} does not exist")
    if owner_uid == os.geteuid() and not os.access(parent, os.W_OK | os.X_OK):
        # the owner runs as us: what we may not do there (a directory of another user, a
        # read-only file system), it may not either; another owner user (root, in
        # system scope) is not judged from here
        fail(path, f"directory {parent} is not writable by the owner's user (uid "
                   f"{owner_uid}): it could not create the socket there")
    if os.path.realpath(parent) != parent:   # the owner binds none through a symlink
        fail(path, f"directory {parent} is reached through a symlink (it resolves to "
                   f"{os.path.realpath(parent)}): name the directory itself")
    try:
        st = os.lstat(addr.path)
    except FileNotFoundError:
        return
    except OSError:
        return  # a directory we cannot read: the owner decides at launch
    if not stat.S_ISSOCK(st.st_mode):
        fail(path, f"{addr.path} exists and is not a socket")
    try:
        live = unix_live(addr.path)
    except OSError:
        return  # cannot tell from here: the owner decides at launch
    if live:   # a busy one too: its full queue does not make it stale
        fail(path, f"a live socket answers at {addr.path}")


def retuned(config: Config, held: list[dict[str, Any]]) -> dict[str, list[str]]:
    """App key -> the names of its sockets the owner holds with another backlog, mode or
    owner than ``config`` gives them (``held``: ``sockets.list``'s, with capability
    ``socketUpdate``); sockets not held yet are bound as declared by their launch."""
    by_key = {h["key"]: h for h in held}
    out: dict[str, list[str]] = {}
    for app in config.apps():
        for s in app.sockets:
            h = by_key.get(held_key(app, s.name, s.listen))
            if h is not None and (h.get("backlog"), h.get("mode"), h.get("user"),
                                  h.get("group")) != s.settings():
                out.setdefault(app.key, []).append(s.name)
    return out


async def retune(owner: Any, epoch: int, app: App) -> None:
    """Have the owner give every socket of ``app`` it holds its settings now
    (``sockets.update``: one already so, or not held, is left as it is; so a socket held
    since the plan was made is covered too). Raises what the owner raised
    (SocketUnavailable naming the socket; StaleEpoch)."""
    if not app.sockets:
        return
    done = await owner.call("sockets.update", {"stack": app.stack, "app": app.name, "sockets":
                                               [s.to_wire() for s in app.sockets]},
                            epoch=epoch)
    if done["updated"]:
        log.info("sockets of %s now as configured: %s", app.key, ", ".join(done["updated"]))


def stale(config: Config, held: list[dict[str, Any]], stores: list[dict[str, Any]]
          ) -> tuple[list[str], list[tuple[str, str, int | None]]]:
    """What the owner holds that ``config`` no longer names: socket keys, and fd stores
    as ``(stack, app, instance)`` (instance None: every instance of an app that is gone
    or has no store any more)."""
    wanted = {held_key(a, s.name, s.listen) for a in config.apps() for s in a.sockets}
    sockets = [h["key"] for h in held if h["key"] not in wanted]
    out: list[tuple[str, str, int | None]] = []
    for st in stores:
        app = config.app(st["stack"], st["app"])
        if app is None or not app.fd_store_max:
            out.append((st["stack"], st["app"], None))
        elif st["instance"] >= app.instances:
            out.append((st["stack"], st["app"], st["instance"]))
    return sockets, sorted(set(out), key=str)


def unnamed(config: Config, app: App) -> list[str]:
    """The keys of the sockets a launch of ``app`` was given that ``config`` no longer
    names (its app gone from it, the socket removed or moved to another address): once
    no live launch uses one, none ever will again."""
    now = config.app(app.stack, app.name)
    wanted = set() if now is None else {held_key(now, s.name, s.listen) for s in now.sockets}
    return [k for k in (held_key(app, s.name, s.listen) for s in app.sockets)
            if k not in wanted]


def sweep_due(config: Config, ran: App, in_use: Collection[str]) -> bool:
    """Whether the end of a process that ran ``ran`` may have freed a held socket that
    ``config`` no longer names, so that a sweep now closes it: one of ``ran``'s own, or
    one of its app's that the last sweep left because a launch used it (``in_use``: app
    keys; a launch a former generation made, on an App this one never knew). Otherwise
    the socket stayed held until the next operation ended, with nobody serving it:
    connections queued and hung instead of being refused."""
    return ran.key in in_use or bool(unnamed(config, ran))


@dataclass(frozen=True)
class Swept:
    """What a :func:`sweep` did: sockets closed, stored fds cleared, and the apps (keys)
    of the stale sockets it left held (a live launch still used them, or the close
    failed)."""

    closed: int = 0
    cleared: int = 0
    in_use: frozenset[str] = frozenset()


async def sweep(owner: Any, epoch: int, config: Config) -> Swept | None:
    """Close the held sockets and clear the fd stores ``config`` no longer names; a
    socket a live launch still uses stays (the sweep after that launch ended closes
    it). Returns None, having done nothing, when the owner could not be listed. Raises
    nothing but StaleEpoch (a newer generation owns the owner)."""
    from protocol.errors import StaleEpoch
    try:
        listing = await owner.call("sockets.list")
    except StaleEpoch:
        raise
    except TenureError as exc:
        log.warning("sockets: cannot list what the owner holds: %s", exc)
        return None
    sockets, stores = stale(config, listing["sockets"], listing["fd_store"])
    app_of = {h["key"]: f"{h['stack']}/{h['app']}" for h in listing["sockets"]}
    closed = cleared = 0
    in_use: set[str] = set()
    for key in sockets:
        try:
            r = await owner.call("sockets.close", {"key": key}, epoch=epoch)
            closed += int(bool(r["closed"]))
        except (Conflict, NotFound):
            in_use.add(app_of[key])   # its app stops first; its end sweeps again
        except StaleEpoch:
            raise
        except TenureError as exc:
            log.warning("sockets: closing %s failed: %s", key, exc)
            in_use.add(app_of[key])
    for stack, app, instance in stores:
        params: dict[str, Any] = {"stack": stack, "app": app}
        if instance is not None:
            params["instance"] = instance
        try:
            cleared += int((await owner.call("fdstore.clear", params, epoch=epoch))
                           ["cleared"])
        except StaleEpoch:
            raise
        except TenureError as exc:
            log.warning("fd store: clearing %s/%s failed: %s", stack, app, exc)
    return Swept(closed, cleared, frozenset(in_use))
