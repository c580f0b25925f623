"""The layout of TENURE_HOME: every state path of every daemon, named once.

See docs/state.md. Directories are 0700; no component may be a symlink.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # the status command needs only str paths: pathlib (with re) costs ~10 ms
    from pathlib import Path

__all__ = ["APP_MARKERS", "HOME_ID_ENV", "LAUNCH_KEY_ENV", "MAINTENANCE_KIND",
           "OWNER_HOME_ENV", "Layout", "default_home", "home_id", "is_release_id",
           "release_of"]

MAINTENANCE_KIND = "tenure-maintenance"   # the ``kind`` of Layout.maintenance
LAUNCH_KEY_ENV = "TENURE_LAUNCH_KEY"
"""Set by the owner in every launch's environment: its launch key."""
OWNER_HOME_ENV = "TENURE_OWNER_HOME"
"""Set by the owner in every launch's environment: the home that launched it."""
HOME_ID_ENV = "TENURE_OWNER_HOME_ID"
"""Set beside it: that home directory's identity (:func:`home_id`). The same path may
name another directory in another container, whose apps this host also sees."""
APP_MARKERS = (LAUNCH_KEY_ENV, OWNER_HOME_ENV, HOME_ID_ENV)
"""What marks a process as an app of a home (owner.evidence): tenure's own daemons,
started from an app's shell, must not carry them."""


def home_id(path: str) -> str:
    """``DEV:INODE`` of the directory at ``path``: which directory it is, whatever path
    names it; ``""`` when no path is given or it cannot be read (a process then counts
    as this home's by its path alone)."""
    try:
        st = os.stat(path) if path else None
    except OSError:
        return ""
    return "" if st is None else f"{st.st_dev}:{st.st_ino}"


def default_home() -> Path:
    """TENURE_HOME, else $XDG_STATE_HOME/tenure, else ~/.local/state/tenure."""
    from pathlib import Path
    return Path(default_home_str())


def default_home_str(given: str | None = None) -> str:
    """``given`` (relative to the working directory), else :func:`default_home`, as an
    absolute str, without importing pathlib."""
    if given is None:
        xdg = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        given = os.environ.get("TENURE_HOME") or os.path.join(xdg, "tenure")
    return os.path.join(os.getcwd(), given)


def is_release_id(value: object) -> bool:
    """True for a string shaped like a release id: 64 lowercase hex digits."""
    return isinstance(value, str) and len(value) == 64 and \
        all(c in "0123456789abcdef" for c in value)


def release_of(module_file: str, releases: Path) -> str | None:
    """The id of the installed release under ``releases`` that ``module_file`` (a
    module's ``__file__``) was loaded from, or None (the installed code). Told by where
    the code lies, so a process cannot claim a release it does not run."""
    from pathlib import Path
    try:
        parts = Path(os.path.realpath(module_file)).relative_to(
            os.path.realpath(releases)).parts
    except ValueError:
        return None
    return parts[0] if parts and is_release_id(parts[0]) else None


class Layout:
    """Paths under one home. Plain class: subclasses add the paths of their own daemon."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.root = os.fspath(home)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root!r})"

    @property
    def home(self) -> Path:
        from pathlib import Path  # made on demand: see TYPE_CHECKING above
        return Path(self.root)

    def _at(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    # execution/ — the owner's
    @property
    def execution(self) -> Path:
        return self.home / "execution"

    @property
    def owner_sock(self) -> str:
        return str(self.execution / "owner.sock")

    @property
    def owner_releases(self) -> Path:
        """Releases staged for the owner (`tenure owner upgrade`), the owner's own copies."""
        return self.execution / "releases"

    @property
    def owner_release(self) -> str:
        """The release the owner runs from (owner.release)."""
        return str(self.execution / "owner-release.json")

    @property
    def journal(self) -> str:
        """The apps' output (owner.journal); the CLI reads it while tenure is down."""
        return str(self.execution / "journal.db")

    @property
    def owner_receipt(self) -> str:
        """How the last owner ended (owner.receipt); `status` says it while tenure is down."""
        return str(self.execution / "owner-receipt.json")

    @property
    def maintenance(self) -> str:
        """The plan and progress of an owner maintenance window (`tenure owner upgrade`)."""
        return self._at("execution", "maintenance.json")   # status reads it: no pathlib

    # runtime/ — the guardian's
    @property
    def runtime(self) -> Path:
        return self.home / "runtime"

    @property
    def up_lock(self) -> str:
        """Held while `tenure up --no-wait` starts the daemons in the background."""
        return self._at("runtime", "up.lock")

    @property
    def guardian_sock(self) -> str:
        return self._at("runtime", "guardian.sock")

    @property
    def guardian_db(self) -> str:
        """The guardian's state.db (guardian.paths.GuardianPaths.state_db)."""
        return self._at("runtime", "state.db")

    @property
    def releases(self) -> Path:
        """Installed releases (the guardian's; the owner runs them too when it may)."""
        return self.runtime / "releases"

    @property
    def handoffs(self) -> Path:
        return self.runtime / "handoffs"

    def handoff_file(self, activation: str) -> str:
        return str(self.handoffs / f"{activation}.json")

    def checkpoint_file(self, activation: str) -> str:
        return str(self.handoffs / f"{activation}.checkpoint.json")

    @property
    def diagnostics(self) -> str:
        return self._at("runtime", "supervisor-state.json")

    # backend/ — the backend generations'
    @property
    def backend(self) -> Path:
        return self.home / "backend"

    @property
    def api_sock(self) -> str:
        return self._at("backend", "api.sock")

    @property
    def backend_db(self) -> str:
        return str(self.backend / "backend.db")

    @property
    def recovery_db(self) -> str:
        return str(self.backend / "recovery.db")

    @property
    def queued_config(self) -> str:
        """A config `tenure up --no-wait` left for the backend to apply (backend.spool)."""
        return str(self.backend / "queued-config.json")

    # logs/ — the daemons' own stderr in unmanaged mode
    @property
    def logs(self) -> Path:
        return self.home / "logs"
