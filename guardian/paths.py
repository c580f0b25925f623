"""Where the guardian and the backend generations keep their state (docs/state.md)."""

from __future__ import annotations

from protocol.layout import Layout
from protocol.sockets import check_socket_path, ensure_private_dir

__all__ = ["GuardianPaths"]


class GuardianPaths(Layout):
    """The guardian's view of the layout; the shared paths come from Layout."""

    @property
    def sock(self) -> str:
        return self.guardian_sock

    @property
    def key(self) -> str:
        return str(self.runtime / "guardian.key")

    @property
    def state_db(self) -> str:
        return str(self.runtime / "state.db")

    @property
    def trusted_keys(self) -> str:
        """Optional: one ``ed25519:<base64>`` public key per line. When present, only
        releases signed by one of them are installed and run."""
        return str(self.runtime / "trusted-release-keys")

    @property
    def interpreters(self) -> str:
        """Interpreter updates the operator reviewed and bound (guardian.interp)."""
        return str(self.runtime / "interpreters.json")

    @property
    def guardian_release(self) -> str:
        """The release the guardian runs from, and a trial of a new one (guardian.own)."""
        return str(self.runtime / "guardian-release.json")

    @property
    def lock(self) -> str:
        return str(self.runtime / "guardian.lock")

    def prepare(self) -> None:
        """Create runtime/, its subdirectories and backend/ (all 0700); check socket
        path lengths. Raises UnsafePath, PathTooLong."""
        check_socket_path(self.sock)
        check_socket_path(self.api_sock)
        for d in (self.runtime, self.releases, self.handoffs, self.backend, self.logs):
            ensure_private_dir(d, root=self.home)
