"""The socket-activation keys of an app in tenure.toml: ``[...apps.A.sockets.NAME]``
tables (``listen``, ``backlog``; for unix sockets ``mode``, ``owner``, ``group``) and
``fd_store_max`` (docs/config.md).

The shape and the addresses are checked here, and so is that no two sockets of the
config claim one address (two apps, or one app twice: ``0.0.0.0:80`` claims every IPv4
``:80``). Whether an address is free on this host is a plan-time check
(:func:`backend.enforce.check_sockets`), so a config saved earlier always parses again.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Mapping
from typing import Any

from .config_lines import KeyPath
from .config_values import NAME_RE, Invalid, check_keys, get_int, get_str, shown, table
from .model import App, SocketSpec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from protocol.listen import ListenAddress

__all__ = ["MAX_FD_STORE", "MAX_SOCKETS", "SOCKET_KEYS", "check_addresses",
           "check_probes", "claims", "parse_sockets"]

SOCKET_KEYS = ("sockets", "fd_store_max")
MAX_SOCKETS = 64      # per app, as the owner accepts
MAX_FD_STORE = 1024   # as the owner accepts
MAX_BACKLOG = 65535
DEFAULT_BACKLOG = 4096  # the kernel caps it at net.core.somaxconn
_KEYS = ("listen", "backlog", "mode", "owner", "group")
_MODE = re.compile(r"0?[0-7]{3}")
_ACCOUNT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,255}")
_WILDCARD: dict[int, str] = {socket.AF_INET: "0.0.0.0", socket.AF_INET6: "::"}


def _mode(t: Mapping[str, Any], path: KeyPath) -> int | None:
    if "mode" not in t:
        return None
    value = t["mode"]
    if isinstance(value, str) and _MODE.fullmatch(value):
        return int(value, 8)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0o777:
        return value
    raise Invalid((*path, "mode"), f"must be an octal string like \"0660\" or an integer "
                                   f"like 0o660 (0 to 0o777), not {shown(value)}")


def _account(t: Mapping[str, Any], key: str, path: KeyPath) -> str | None:
    name = get_str(t, key, path, None)
    if name is not None and not _ACCOUNT.fullmatch(name):
        raise Invalid((*path, key), f"invalid {key} name {name!r}")
    return name


def _socket(name: str, t: Mapping[str, Any], path: KeyPath) -> SocketSpec:
    check_keys(t, _KEYS, path)
    if "listen" not in t:
        raise Invalid((*path, "listen"), "is required: host:port, [v6]:port or "
                                         "unix:/path")
    from protocol.listen import parse_listen  # and dataclasses: where there are sockets
    try:
        addr = parse_listen(t["listen"])
    except ValueError as e:
        raise Invalid((*path, "listen"), str(e)) from None
    mode = _mode(t, path)
    owner, group = _account(t, "owner", path), _account(t, "group", path)
    if not addr.is_unix:
        for key in ("mode", "owner", "group"):
            if key in t:
                raise Invalid((*path, key), "applies to unix sockets only")
    return SocketSpec(name=name, listen=str(addr),
                      backlog=get_int(t, "backlog", path, DEFAULT_BACKLOG, 1, MAX_BACKLOG),
                      mode=mode, owner=owner, group=group)


def parse_sockets(t: Mapping[str, Any], path: KeyPath) -> dict[str, Any]:
    """``sockets`` and ``fd_store_max`` of the app at ``path`` (keyword arguments of
    App). Raises Invalid."""
    raw = table(t["sockets"], (*path, "sockets")) if "sockets" in t else {}
    if len(raw) > MAX_SOCKETS:
        raise Invalid((*path, "sockets"), f"at most {MAX_SOCKETS} sockets per app")
    sockets = []
    for name, value in raw.items():
        here = (*path, "sockets", name)
        if not NAME_RE.fullmatch(name):
            raise Invalid(here, f"invalid socket name {name!r}: use 1-64 letters, digits, "
                                "'_', '.' or '-', starting with a letter or digit")
        sockets.append(_socket(name, table(value, here), here))
    return {"sockets": tuple(sockets),
            "fd_store_max": get_int(t, "fd_store_max", path, 0, 0, MAX_FD_STORE)}


def claims(a: ListenAddress, b: ListenAddress) -> bool:
    """Whether binding both would collide: the same path, or the same port and family
    with the same host or a wildcard (``0.0.0.0``, ``::``) on either side."""
    if a.is_unix or b.is_unix:
        return a.is_unix and b.is_unix and a.path == b.path
    if a.family != b.family or a.port != b.port:
        return False
    wild = _WILDCARD[a.family]
    return a.host == b.host or wild in (a.host, b.host)


def check_addresses(apps: list[App], metrics: str | None = None) -> None:
    """No two sockets of the config, nor a socket and the metrics listener (``[metrics]
    listen``, already checked), claim one address. Raises Invalid at the later one."""
    declared = [(app, s) for app in apps for s in app.sockets]
    if not declared:
        return
    from protocol.listen import parse_listen
    seen: list[tuple[ListenAddress, str]] = []
    for app, s in declared:
        addr = parse_listen(s.listen)
        path: KeyPath = ("stacks", app.stack, "apps", app.name, "sockets", s.name, "listen")
        for other, who in seen:
            if claims(addr, other):
                raise Invalid(path, f"{s.listen} is already claimed by {who} ({other})")
        seen.append((addr, f"{app.key} socket {s.name!r}"))
    for addr in _metrics_addresses(metrics):
        for other, who in seen:
            if claims(addr, other):
                raise Invalid(("metrics", "listen"), f"{metrics} is already claimed by "
                                                     f"{who} ({other})")


def check_probes(app: App, path: KeyPath) -> None:
    """No readiness or health check of ``app`` connects to a TCP socket the owner holds
    for it where the answer says nothing of the process checked: a tcp check (the held
    socket listens before the app runs and after it hangs: it always passes), or an http
    check of a socket its instances share (any of them may answer). An http check of an
    app with one instance is answered by that instance alone. Raises Invalid."""
    if not app.sockets:
        return   # (and protocol.listen is not imported: `up` parses without it)
    held = _held_tcp(app)
    for key, probe in (("ready", app.ready), ("health", app.health)):
        if probe is None or probe.kind.value not in ("tcp", "http"):
            continue
        tcp = probe.kind.value == "tcp"
        for host, port in _probed(probe, app.instances):
            # a tcp readiness check finds the app's listener by its port alone (it does
            # not connect: backend.probes), whatever the host: a held socket of that
            # port on another address or family passes it as well
            hit = next(((s.name, s.listen) for s, a in held
                        if (a.port == port if tcp else _reaches(host, port, a))), None)
            if hit is None:
                continue
            name, listen = hit
            if tcp:
                raise Invalid((*path, key, "port"), f"{port} is the port of the app's "
                              f"socket {name!r} ({listen}), which the owner holds: it "
                              "listens before the app runs, so a tcp check of it passes "
                              "whatever the app does; use `kind = \"notify\"`, `exec`, "
                              "or a port the app opens itself")
            if app.instances > 1:
                raise Invalid((*path, key, "url"), f"{probe.url} reaches the app's "
                              f"socket {name!r} ({listen}), which its {app.instances} "
                              "instances share: any of them may answer, so it says "
                              "nothing of one instance; use `kind = \"notify\"`, `exec`, "
                              "or a port each instance opens itself")


def _held_tcp(app: App) -> list[tuple[SocketSpec, ListenAddress]]:
    from protocol.listen import parse_listen
    held = [(s, parse_listen(s.listen)) for s in app.sockets]
    return [(s, a) for s, a in held if not a.is_unix]


def _probed(probe: Any, instances: int) -> list[tuple[str, int]]:
    """The (host, port) pairs a tcp or http check of each instance connects to."""
    if probe.url is not None:
        from urllib.parse import urlsplit
        u = urlsplit(probe.url)
        return [(u.hostname or "", u.port or (443 if u.scheme == "https" else 80))]
    return [(probe.host, probe.port + i * probe.port_step) for i in range(instances)]


def _reaches(host: str, port: int, addr: ListenAddress) -> bool:
    """Whether connecting to ``host:port`` may reach the socket bound to ``addr``: the
    same port, and the address the connect ends at (:func:`_connects_to`) the bound one
    or of its family's wildcard, or a host name (not resolved). A ``[::]`` socket is
    IPv6 only (the owner sets IPV6_V6ONLY): IPv4, v4-mapped or not, never reaches it."""
    if port != addr.port:
        return False
    try:
        target = _connects_to(ipaddress.ip_address(host.partition("%")[0]))
    except ValueError:
        return True    # a name such as localhost: it may resolve to the address
    bound = ipaddress.ip_address(addr.host)
    return target.version == bound.version and (bound.is_unspecified or target == bound)


def _connects_to(ip: ipaddress.IPv4Address | ipaddress.IPv6Address
                 ) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address a TCP connect to ``ip`` reaches on Linux: a v4-mapped IPv6 address
    (``::ffff:127.0.0.1``) goes over IPv4 to that IPv4 address, and the unspecified
    address of a family (``0.0.0.0``, ``::``) to its loopback one."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        return ipaddress.ip_address("127.0.0.1" if ip.version == 4 else "::1")
    return ip


def _metrics_addresses(listen: str | None) -> list[ListenAddress]:
    """What the metrics listener (``HOST:PORT``, checked already: an IP literal without
    a zone, or localhost) binds: ``localhost`` may be either loopback. Raises nothing
    for a checked address."""
    if listen is None:
        return []
    from protocol.listen import parse_listen
    host, _, port = listen.rpartition(":")
    hosts = ("127.0.0.1", "[::1]") if host == "localhost" else (host,)
    return [parse_listen(f"{h}:{port}") for h in hosts]
