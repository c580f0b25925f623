"""The ``[metrics]`` table of tenure.toml: where the backend serves Prometheus metrics.

``listen = "HOST:PORT"`` with HOST an IP address (``[v6]`` in brackets) or ``localhost``
and PORT 1-65535. Absent: no listener (metrics are opt-in). A host name other than
localhost is refused: binding must not depend on name resolution at start. A scoped IPv6
address (``[fe80::1%eth0]``) is refused as it is for an app's socket: the check that no
socket of the config claims the listener's address compares addresses without zones.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from .config_lines import KeyPath
from .config_values import Invalid, check_keys, get_str
from .model import MetricsSettings

__all__ = ["parse_listen", "parse_metrics"]


def parse_listen(text: str) -> tuple[str, int] | None:
    """(host, port) of ``HOST:PORT``; None when malformed. Pure; raises nothing."""
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or \
            not 1 <= int(port) <= 65535 or port != str(int(port)):
        return None
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if host == "localhost" and not bracketed:
        return host, int(port)
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None
    if (addr.version == 6) != bracketed or getattr(addr, "scope_id", None) is not None:
        return None
    return host, int(port)


def parse_metrics(t: Mapping[str, Any]) -> MetricsSettings:
    """Raises Invalid."""
    path: KeyPath = ("metrics",)
    check_keys(t, ("listen",), path)
    listen = get_str(t, "listen", path, None)
    if listen is not None and parse_listen(listen) is None:
        raise Invalid((*path, "listen"), _malformed(listen))
    return MetricsSettings(listen=listen)


def _malformed(listen: str) -> str:
    """Why ``listen`` is refused, as an app's socket says it of a scoped address."""
    if "%" in listen:
        return f"scoped IPv6 addresses (%zone) are not supported, not {listen!r}"
    return ("must be HOST:PORT with an IP address (IPv6 in brackets) or localhost and "
            f"a port 1-65535, not {listen!r}")
