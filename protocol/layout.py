"""The layout of TENURE_HOME: every state path of every daemon, named once.

See docs/state.md. Directories are 0700; no component may be a symlink.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["Layout", "default_home"]


def default_home() -> Path:
    """TENURE_HOME, else $XDG_STATE_HOME/tenure, else ~/.local/state/tenure."""
    env = os.environ.get("TENURE_HOME")
    if env:
        return Path(env).absolute()
    xdg = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return (Path(xdg) / "tenure").absolute()


class Layout:
    """Paths under one home. Plain class: subclasses add the paths of their own daemon."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.home)!r})"

    # execution/ — the owner's
    @property
    def execution(self) -> Path:
        return self.home / "execution"

    @property
    def owner_sock(self) -> str:
        return str(self.execution / "owner.sock")

    # runtime/ — the guardian's
    @property
    def runtime(self) -> Path:
        return self.home / "runtime"

    @property
    def guardian_sock(self) -> str:
        return str(self.runtime / "guardian.sock")

    @property
    def handoffs(self) -> Path:
        return self.runtime / "handoffs"

    def handoff_file(self, activation: str) -> str:
        return str(self.handoffs / f"{activation}.json")

    def checkpoint_file(self, activation: str) -> str:
        return str(self.handoffs / f"{activation}.checkpoint.json")

    @property
    def diagnostics(self) -> str:
        return str(self.runtime / "supervisor-state.json")

    # backend/ — the backend generations'
    @property
    def backend(self) -> Path:
        return self.home / "backend"

    @property
    def api_sock(self) -> str:
        return str(self.backend / "api.sock")

    @property
    def backend_db(self) -> str:
        return str(self.backend / "backend.db")

    @property
    def recovery_db(self) -> str:
        return str(self.backend / "recovery.db")

    # logs/ — the daemons' own stderr in unmanaged mode
    @property
    def logs(self) -> Path:
        return self.home / "logs"
