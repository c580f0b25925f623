"""The owner's methods of held sockets and the fd store (sockets.*, fdstore.clear). A
part of owner.service.OwnerService (it mixes this in), apart for size."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocol.errors import Conflict
from protocol.server import Call

from .observations import ObservationRing
from .sockets import SocketDecl, socket_key
from .supervise import Launcher

__all__ = ["SocketMethods"]


class SocketMethods:
    """What owner.service.OwnerService gives these methods."""

    launcher: Launcher
    ring: ObservationRing
    _require_epoch: Callable[[Call], None]

    def _held(self, stack: str | None = None) -> dict[str, Any]:
        users = self.launcher.sockets_in_use()
        socks = [{**w, "used_by": sorted(users.get(w["key"], []))}
                 for w in self.launcher.sockets.to_wire()
                 if stack is None or w["stack"] == stack]
        store = [s for s in self.launcher.fdstore.to_wire()
                 if stack is None or s["stack"] == stack]
        return {"sockets": socks, "fd_store": store}

    async def sockets_list(self, call: Call) -> Any:
        """Held sockets (address, inode, accept queue, launches using them) and stored
        fds per app instance."""
        return {**self._held(), "fd_store_stats": dict(self.launcher.fdstore.stats)}

    async def sockets_close(self, call: Call) -> Any:
        """Close the socket held under ``key``; idempotent. Raises Conflict, closing
        nothing, while a live launch was given it."""
        self._require_epoch(call)
        key = call.params["key"]
        users = sorted(self.launcher.sockets_in_use().get(key, []))
        if users:
            raise Conflict(f"socket {key} is in use by {', '.join(users[:5])}",
                           {"key": key, "launch_keys": users[:100]})
        closed = self.launcher.sockets.close(key)
        if closed:
            self.ring.emit("socket_closed", key=key)
        return {"key": key, "closed": closed}

    async def sockets_update(self, call: Call) -> Any:
        """Give the sockets held for ``stack/app`` the backlog, mode and owner of
        ``sockets`` (each as a launch names it) now, each staying the same socket; one
        not held is left to the launch that creates it, one that has them already is
        not touched (``updated`` names those changed). All are parsed before any is
        changed. Raises BadRequest (a bad socket) and SocketUnavailable (naming the one
        that could not take its settings; those before it took theirs)."""
        self._require_epoch(call)
        p = call.params
        decls = [SocketDecl.from_wire(d) for d in p["sockets"]]
        updated, not_held = [], []
        for decl in decls:
            key = socket_key(p["stack"], p["app"], decl)
            if key not in self.launcher.sockets.held:
                not_held.append(key)
            elif self.launcher.sockets.update(p["stack"], p["app"], decl):
                updated.append(key)
                self.ring.emit("socket_updated", key=key)
        return {"updated": updated, "not_held": not_held}

    async def fdstore_clear(self, call: Call) -> Any:
        """Close the stored fds of ``stack/app`` (one instance, or all); idempotent."""
        self._require_epoch(call)
        p = call.params
        store = self.launcher.fdstore
        keys = [k for k in store.stored_keys() if k[:2] == (p["stack"], p["app"])
                and (p["instance"] is None or k[2] == p["instance"])]
        return {"cleared": sum(store.clear(k) for k in keys)}
