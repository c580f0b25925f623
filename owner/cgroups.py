"""Per-app cgroups when the owner runs in a delegated cgroup v2 subtree.

Under systemd with ``Delegate=yes`` the owner's unit cgroup belongs to the owner. It then
gives every application instance a cgroup of its own, for exact membership (stop is
confirmed when ``cgroup.procs`` is empty, not by a /proc scan), a kill that no fork can
outrun (``cgroup.kill``) and resource figures from the kernel (``memory.current``,
``cpu.stat``). Layout below the owner's cgroup ``OWN``::

    OWN/                    subtree_control: +memory +pids +cpu (those available)
      owner/                the owner process itself (a leaf: see below)
      apps/                 subtree_control: the same controllers
        <app cgroup>        one per launch, named by :func:`cgroup_name`

Why the owner leaves ``OWN``: cgroup v2 forbids processes in a cgroup that distributes
controllers to children ("no internal processes"), so ``OWN`` must hold none.

Without delegation (no cgroup2 at /sys/fs/cgroup, hybrid hierarchies, a cgroup we cannot
write, or one shared with other processes) :func:`setup` returns None and the owner keeps
using process groups, exactly as before.

How an app gets into its cgroup before its program runs: :data:`SHIM` — the child
starts as ``/bin/sh``, writes its own pid into the app cgroup's ``cgroup.procs`` and only
then execs the app (same pid, so the pid, pidfd and start ticks the owner recorded stay
right). If the write fails the shim exits with :data:`SHIM_MOVE_FAILED` and the app never
runs. ``preexec_fn`` would do the same inside Python but disables vfork and runs Python
code in the child of a process with threads (the owner's journal writer); launches that
switch users need a step between fork and exec anyway and join their cgroup there
(:mod:`owner.runas`, which says why that is safe).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "APPS",
    "LEAF",
    "SHIM",
    "SHIM_MOVE_FAILED",
    "WANTED_CONTROLLERS",
    "CgroupTree",
    "cgroup_name",
    "detect",
    "members",
    "members_strict",
    "read_proc_cgroup",
    "setup",
    "shim_argv",
]

log = logging.getLogger(__name__)

LEAF = "owner"
APPS = "apps"
WANTED_CONTROLLERS = ("memory", "pids", "cpu")
MOUNT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")

SHIM_MOVE_FAILED = 125
# $1 is the app cgroup directory, the rest is the app's argv. `exec "$@"` keeps every
# argument intact (no word splitting, no globbing); argv[0] is looked up in the app's PATH
# like Popen does. The pid does not change across exec.
SHIM = f'echo $$ > "$1/cgroup.procs" || exit {SHIM_MOVE_FAILED}; shift; exec "$@"'

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_READABLE = 64


def shim_argv(cgroup_dir: str, argv: list[str] | tuple[str, ...]) -> list[str]:
    """The argv that starts ``argv`` inside ``cgroup_dir`` (see :data:`SHIM`)."""
    return ["/bin/sh", "-c", SHIM, "tenure-cgroup-shim", cgroup_dir, *argv]


def cgroup_name(launch_key: str) -> str:
    """A cgroup directory name for ``launch_key``: letters, digits, ``_`` and ``-`` only.

    Keys hold ``/`` (``stack/app/0/3``); every other character becomes ``_`` and, when
    anything was replaced or cut, a hash of the whole key is appended so two keys never
    share a name. No ``.``: it keeps names clear of interface files (``cgroup.procs``,
    ``memory.max``) and of ``.``/``..``. Pure; raises nothing.
    """
    readable = _UNSAFE.sub("_", launch_key)[:_MAX_READABLE] or "_"
    if readable == launch_key:
        return readable
    digest = hashlib.sha256(launch_key.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{readable}-{digest}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def members(cgroup_dir: Path) -> list[int]:
    """Pids in ``cgroup_dir``/cgroup.procs (zombies are never listed). A cgroup that no
    longer exists, or whose list cannot be read, has none. Raises nothing."""
    try:
        return members_strict(cgroup_dir)
    except OSError:
        return []


def members_strict(cgroup_dir: Path) -> list[int]:
    """:func:`members`, for figures whose absence must not read as zero
    (owner.metrics): only a cgroup that no longer exists (ENOENT; ENODEV once removed)
    has none. Raises OSError when ``cgroup.procs`` could not be read for any other
    reason (the owner out of descriptors: EMFILE)."""
    try:
        text = (cgroup_dir / "cgroup.procs").read_text(encoding="ascii", errors="replace")
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENODEV):
            return []
        raise
    return [int(w) for w in text.split() if w.isdigit()]


def own_cgroup_path(proc_cgroup: Path = PROC_SELF_CGROUP) -> str | None:
    """The ``0::/path`` entry of /proc/self/cgroup (the unified hierarchy), or None."""
    text = _read(proc_cgroup)
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def detect(mount: Path = MOUNT, proc_cgroup: Path = PROC_SELF_CGROUP) -> Path | None:
    """The directory of this process's cgroup if it is delegated to us, else None.

    Delegated means: /proc/self/cgroup names a cgroup v2 path, ``mount`` is a pure
    cgroup2 mount (it has ``cgroup.controllers``; a hybrid or v1 /sys/fs/cgroup is a
    tmpfs without it), the path is not the (namespace) root, and its directory, its
    ``cgroup.procs`` and ``cgroup.subtree_control`` are writable by us. Raises nothing.
    """
    rel = own_cgroup_path(proc_cgroup)
    if rel is None or not rel.startswith("/") or rel.strip("/") == "":
        return None
    if " (deleted)" in rel or not (mount / "cgroup.controllers").is_file():
        return None
    own = mount / rel.strip("/")
    if not own.is_dir() or not os.access(own, os.W_OK | os.X_OK):
        return None
    for name in ("cgroup.procs", "cgroup.subtree_control"):
        if not os.access(own / name, os.W_OK):
            return None
    return own


@dataclass(frozen=True)
class CgroupTree:
    """The owner's delegated subtree (``own``) once :func:`setup` arranged it."""

    own: Path
    controllers: tuple[str, ...]
    has_kill: bool

    @property
    def apps(self) -> Path:
        return self.own / APPS

    def app_dir(self, launch_key: str) -> Path:
        return self.apps / cgroup_name(launch_key)

    def create(self, launch_key: str) -> Path:
        """Create the launch's cgroup, empty. A leftover empty directory of the same name
        is reused. Raises OSError (EBUSY when the name is held by a populated cgroup)."""
        path = self.app_dir(launch_key)
        try:
            path.mkdir(mode=0o755)
        except FileExistsError:
            if members(path):
                raise OSError(errno.EBUSY, "an app cgroup of that name is still populated",
                              os.fspath(path)) from None
        return path

    def remove(self, path: Path) -> bool:
        """rmdir an app cgroup; True if it is gone. A populated one stays (False)."""
        try:
            path.rmdir()
        except FileNotFoundError:
            return True
        except OSError as e:
            log.debug("cannot remove %s yet: %s", path, e)
            return False
        return True

    def kill(self, path: Path) -> bool:
        """SIGKILL every process in ``path`` at once (``cgroup.kill``); False when the
        kernel has no cgroup.kill (before 5.14) or the cgroup is gone."""
        if not self.has_kill:
            return False
        try:
            (path / "cgroup.kill").write_text("1")
        except OSError:
            return False
        return True

    def usage(self, path: Path) -> dict[str, Any]:
        """Kernel figures for one app cgroup; a file that is absent (controller not
        enabled) is left out. Raises nothing."""
        out: dict[str, Any] = {"cgroup": os.fspath(path)}
        mem = _read(path / "memory.current")
        if mem is not None and mem.strip().isdigit():
            out["memory_current_bytes"] = int(mem)
        pids = _read(path / "pids.current")
        if pids is not None and pids.strip().isdigit():
            out["pids_current"] = int(pids)
        stat = _read(path / "cpu.stat")
        for line in (stat or "").splitlines():
            key, _, value = line.partition(" ")
            if key in ("usage_usec", "user_usec", "system_usec") and value.isdigit():
                out[f"cpu_{key}"] = int(value)
        out["procs"] = len(members(path))
        return out

    def sweep(self) -> list[str]:
        """Remove empty app cgroups left by a previous owner; return populated ones."""
        left: list[str] = []
        try:
            entries = list(self.apps.iterdir())
        except OSError:
            return left
        for entry in entries:
            if entry.is_dir() and not self.remove(entry):
                left.append(entry.name)
        return left

    def to_wire(self) -> dict[str, Any]:
        return {"cgroup": os.fspath(self.own), "controllers": list(self.controllers)}


def _enable(parent: Path, wanted: tuple[str, ...]) -> tuple[str, ...]:
    """Enable those of ``wanted`` that ``parent`` offers for its children; returns what
    ended up enabled. A controller the kernel refuses is logged and skipped."""
    offered = (_read(parent / "cgroup.controllers") or "").split()
    for name in (c for c in wanted if c in offered):
        try:
            (parent / "cgroup.subtree_control").write_text(f"+{name}")
        except OSError as e:
            log.warning("cannot enable the %s controller in %s: %s", name, parent, e)
    enabled = (_read(parent / "cgroup.subtree_control") or "").split()
    return tuple(c for c in wanted if c in enabled)


def enter_leaf(own: Path, pid: int) -> Path:
    """Move ``pid`` (the whole process) into ``own/owner``. Raises OSError."""
    leaf = own / LEAF
    leaf.mkdir(mode=0o755, exist_ok=True)
    (leaf / "cgroup.procs").write_text(str(pid))
    return leaf


def arrange(own: Path, pid: int,
            wanted: tuple[str, ...] = WANTED_CONTROLLERS) -> CgroupTree | None:
    """Arrange ``own`` for per-app cgroups with process ``pid`` as its owner.

    Refuses (None, nothing changed) when ``own`` holds any process but ``pid``: then it
    is not ours alone (a shared login scope, say) and moving things around would break
    someone else. Otherwise moves ``pid`` into the leaf, enables controllers and creates
    ``apps/``. Raises OSError when the cgroup filesystem refuses a step.
    """
    others = [p for p in members(own) if p != pid]
    if others:
        log.info("cgroup %s also holds pids %s: not delegated to the owner alone; using "
                 "process groups", own, others[:5])
        return None
    enter_leaf(own, pid)
    enabled = _enable(own, wanted)
    apps = own / APPS
    apps.mkdir(mode=0o755, exist_ok=True)
    enabled_apps = _enable(apps, enabled)
    has_kill = (apps / "cgroup.kill").exists()
    return CgroupTree(own=own, controllers=enabled_apps, has_kill=has_kill)


def setup(mount: Path = MOUNT, proc_cgroup: Path = PROC_SELF_CGROUP) -> CgroupTree | None:
    """Detect delegation and arrange it for this process; None means process groups.

    Never raises: a cgroup filesystem that refuses a step is logged and the owner falls
    back to process groups (the leaf move, if it happened, is harmless).
    """
    own = detect(mount, proc_cgroup)
    if own is None:
        return None
    try:
        tree = arrange(own, os.getpid())
    except OSError as e:
        log.warning("delegated cgroup %s cannot be arranged (%s); using process groups",
                    own, e)
        return None
    if tree is not None:
        left = tree.sweep()
        if left:
            log.warning("app cgroups of a previous owner are still populated: %s", left[:5])
        log.info("cgroup mode in %s (controllers: %s)", own,
                 " ".join(tree.controllers) or "none")
    return tree


def read_proc_cgroup(pid: int) -> str | None:
    """The unified-hierarchy cgroup path of ``pid``; None if gone. Raises nothing."""
    return own_cgroup_path(Path(f"/proc/{pid}/cgroup"))
