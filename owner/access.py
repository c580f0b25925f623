"""Who may reach the owner: root, the owner's own uid and, in system scope, the service
account its guardian and backends run as. Nobody else — in particular no app's user.

In system scope the owner runs as root (to switch apps to their users and manage
cgroups) and is started with ``--service-account NAME``. Then:

- the home may be owned by the service account (it owns everything but ``execution/``);
- ``execution/`` is ``root:<account's group> 0710``: the account may pass through to the
  socket but list and read nothing (owner.db holds every app's environment);
- ``owner.sock`` is ``root:<account's group> 0660``, and the server admits root and the
  account's uid as admin (SO_PEERCRED), refusing everyone else with ``UNAUTHORIZED``
  (logged: protocol.server).

Apps never share the account's group: a plan naming such a user is refused
(backend.enforce), so the directory and the socket's group bits do not reach them.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass

from protocol.errors import BadRequest
from protocol.sockets import Authorizer, admins, share_with_group

from .paths import OwnerPaths

__all__ = ["ServiceAccount"]


@dataclass(frozen=True)
class ServiceAccount:
    name: str
    uid: int
    gid: int

    @classmethod
    def lookup(cls, name: str) -> ServiceAccount:
        """Raises BadRequest when the account does not exist or the owner is not root
        (only a root owner has anyone to separate from)."""
        if os.geteuid() != 0:
            raise BadRequest("--service-account needs the owner to run as root")
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise BadRequest(f"service account {name!r} does not exist") from None
        return cls(name, pw.pw_uid, pw.pw_gid)

    @property
    def dir_owners(self) -> tuple[int, ...]:
        """Who may own the directories above ``execution/`` (the home is the account's)."""
        return (0, os.geteuid(), self.uid)

    def authorizer(self) -> Authorizer:
        return admins(self.uid)

    def open_socket(self, paths: OwnerPaths) -> None:
        """Let the account (and only it) reach ``owner.sock``: see the module docstring.
        Raises OSError."""
        share_with_group([str(paths.dir)], paths.sock, self.gid)
