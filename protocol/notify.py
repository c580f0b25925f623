"""sd_notify for tenure's own daemons: systemd-python when installed, else a datagram
to $NOTIFY_SOCKET. A no-op outside systemd."""

from __future__ import annotations

import os
import socket

__all__ = ["sd_notify"]


def sd_notify(message: str) -> bool:
    """Send ``message`` (e.g. ``READY=1``); True when a notify socket took it."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    try:
        from systemd import daemon
        return bool(daemon.notify(message))
    except ImportError:
        pass
    except OSError:
        return False
    if path.startswith("@"):
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        try:
            s.connect(path)
            s.sendall(message.encode())
        except OSError:
            return False
    return True
