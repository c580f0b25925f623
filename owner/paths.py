"""Where the owner keeps its state under TENURE_HOME (see docs/state.md)."""

from __future__ import annotations

import os
from pathlib import Path

from protocol.errors import AlreadyRunning, NotFound
from protocol.flocks import hold
from protocol.layout import Layout, default_home
from protocol.sockets import check_private_dir, check_socket_path, ensure_private_dir

__all__ = ["OwnerPaths", "default_home"]


class OwnerPaths(Layout):
    """The owner's view of the layout; the shared paths come from Layout."""

    @property
    def dir(self) -> Path:
        return self.execution

    @property
    def home_marker(self) -> str:
        """This home as every launch's OWNER_HOME_ENV names it (resolved: the daemon and
        a reconcile may be given the home in different spellings)."""
        return os.path.realpath(self.home)

    @property
    def sock(self) -> str:
        return self.owner_sock

    @property
    def notify_sock(self) -> str:
        return str(self.dir / "notify.sock")

    def notify_address(self, instance: str) -> str:
        """``NOTIFY_SOCKET`` for apps. An owner that runs as root may start apps as other
        users, who cannot reach a socket file in the private state directory; it then
        uses an abstract address named after its instance (random, minted at start, so
        nobody can bind it first). Anyone may send to it, which changes nothing: a
        message counts only for the app whose process group the kernel-stamped sender
        pid is in (owner.notify). A non-root owner keeps the 0600 file."""
        if os.geteuid() == 0:
            return f"@tenure/{instance}/notify"
        return self.notify_sock

    @property
    def db(self) -> str:
        return str(self.dir / "owner.db")

    @property
    def receipt(self) -> str:
        return self.owner_receipt

    @property
    def receipts(self) -> str:
        """Unclean receipts of previous owners, kept as evidence."""
        return str(self.dir / "receipts")

    @property
    def ack(self) -> str:
        return str(self.dir / "reconcile-ack.json")

    @property
    def guardian_pub(self) -> str:
        return str(self.dir / "guardian.pub")

    @property
    def lock(self) -> str:
        return str(self.dir / "owner.lock")

    def take_lock(self) -> int:
        """Hold execution/owner.lock for this process's lifetime (close-on-exec, so no
        application inherits it). Raises AlreadyRunning when another owner holds it."""
        fd = hold(self.lock)
        if fd is None:
            raise AlreadyRunning(f"another owner is running on {self.home}",
                                 {"home": str(self.home)})
        return fd

    def take_existing_lock(self) -> int:
        """:meth:`take_lock` for a command about the state an owner left (reconcile),
        which must not create it: raises NotFound when this home holds none, UnsafePath
        when execution/ is not a private directory of ours, AlreadyRunning."""
        if not os.path.lexists(self.dir):
            raise NotFound(f"{self.home} holds no owner state ({self.dir} does not exist): "
                           "is the home right?", {"path": str(self.dir)})
        check_private_dir(self.dir)
        return self.take_lock()

    def prepare(self, owners: tuple[int, ...] | None = None) -> None:
        """Create home and execution/ (0700) and check every socket path's length; the
        home may be owned by any of ``owners`` (default: us or root). Raises UnsafePath
        or PathTooLong."""
        check_socket_path(self.sock)
        check_socket_path(self.notify_sock)
        ensure_private_dir(self.dir, root=self.home, owners=owners)
        check_private_dir(self.dir)  # execution/ itself is always the owner's own
