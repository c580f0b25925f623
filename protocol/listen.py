"""Listening addresses of app sockets: ``127.0.0.1:8080``, ``[::1]:8080``, ``unix:/run/a.sock``.

One parser for the backend (config, plan-time checks) and the owner (which binds them),
so both agree on what an address is and on its canonical spelling, which is part of the
key the owner holds a socket under. Pure: :func:`parse_listen` raises ``ValueError`` with
a one-line problem and nothing else.

Only IP literals are accepted, never host names: a name would be resolved at bind time
and could mean something else at the next bind.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass

__all__ = ["MAX_UNIX_PATH", "ListenAddress", "parse_listen"]

MAX_UNIX_PATH = 100  # bytes; sun_path holds 108, and every tenure socket path keeps to 100


@dataclass(frozen=True)
class ListenAddress:
    """A parsed address: ``family`` is AF_INET, AF_INET6 or AF_UNIX; ``host``/``port`` for
    the first two, ``path`` for the last."""

    family: int
    host: str = ""
    port: int = 0
    path: str = ""

    @property
    def is_unix(self) -> bool:
        return self.family == socket.AF_UNIX

    @property
    def sockaddr(self) -> tuple[str, int] | str:
        """What ``socket.bind`` takes."""
        return self.path if self.is_unix else (self.host, self.port)

    def __str__(self) -> str:
        if self.is_unix:
            return f"unix:{self.path}"
        if self.family == socket.AF_INET6:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


def _port(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 5:
        raise ValueError(f"port {text!r} must be a number between 1 and 65535")
    port = int(text)
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} must be between 1 and 65535")
    return port


def _unix(path: str) -> ListenAddress:
    if not path.startswith("/"):
        raise ValueError("a unix socket path must be absolute (unix:/run/app.sock)")
    if "\0" in path:
        raise ValueError("a unix socket path must not contain NUL")
    if os.path.normpath(path) != path or path.endswith("/"):
        raise ValueError(f"unix socket path {path!r} is not normalised (no '.', '..', "
                         "'//' or trailing '/')")
    if len(os.fsencode(path)) > MAX_UNIX_PATH:
        raise ValueError(f"unix socket path is longer than {MAX_UNIX_PATH} bytes")
    return ListenAddress(socket.AF_UNIX, path=path)


def parse_listen(text: object) -> ListenAddress:
    """``host:port`` (IPv4 literal), ``[v6]:port`` (IPv6 literal) or ``unix:/abs/path``.

    Raises ValueError naming the problem (not a string, a host name, a port outside
    1..65535, a relative or unnormalised path, a path over 100 bytes).
    """
    if not isinstance(text, str) or not text:
        raise ValueError("listen must be a non-empty string")
    if text.startswith("unix:"):
        return _unix(text[5:])
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"{text!r}: an IPv6 address is written [addr]:port")
        try:
            addr6 = ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
        if addr6.scope_id:
            raise ValueError("scoped IPv6 addresses (%zone) are not supported")
        return ListenAddress(socket.AF_INET6, str(addr6), _port(port))
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r}: write host:port, [v6]:port or unix:/path")
    try:
        addr4 = ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(f"{host!r} is not an IPv4 address (host names are not accepted; "
                         "IPv6 is written [addr]:port)") from None
    return ListenAddress(socket.AF_INET, str(addr4), _port(port))
