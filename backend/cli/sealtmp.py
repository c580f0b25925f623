"""The temporary trees `tenure up` seals the installed tenure into, under runtime/.

A tree lives in ``runtime/seal-XXXX`` while it is sealed and installed, and is removed
afterwards whatever failed (:func:`sealed_here`). One left by a command that was killed
meanwhile (SIGKILL, a power cut) is removed by a later one (:func:`sweep`): a tree whose
directory no live command holds locked (flock(2), released by the kernel when its holder
dies) and which has not changed for STALE_AFTER_S (the moment between the directory's
creation and its lock)."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from protocol.layout import Layout
from protocol.sockets import ensure_private_dir

__all__ = ["PREFIX", "STALE_AFTER_S", "sealed_here", "sweep"]

PREFIX = "seal-"
STALE_AFTER_S = 60.0


@contextmanager
def sealed_here(layout: Layout) -> Iterator[Path]:
    """A release sealed from the installed tenure, in a temporary directory under
    runtime/ that is held locked while it is used and removed afterwards, whatever
    failed (a failure to remove it is raised only when nothing else failed: the first
    failure is the one to report). Raises what sealing raises, OSError."""
    import tempfile

    from guardian.seal import seal
    from guardian.treefiles import remove_tree
    ensure_private_dir(layout.runtime, root=layout.home)
    tmp = Path(tempfile.mkdtemp(dir=layout.runtime, prefix=PREFIX))
    held = _open_dir(tmp)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield seal(tmp / "release").path
        except BaseException:
            with suppress(OSError):
                remove_tree(tmp)
            raise
        try:
            remove_tree(tmp)
        except KeyboardInterrupt:   # a Ctrl-C cut it short: what is left goes first
            with suppress(OSError):
                remove_tree(tmp)
            raise
    finally:
        os.close(held)


def sweep(layout: Layout) -> None:
    """Remove the seal trees under runtime/ that a killed command left: unlocked and
    unchanged for STALE_AFTER_S. Never raises: a tree that cannot be looked at or
    removed now is left for a later sweep (a leftover costs disk space, nothing else)."""
    from guardian.treefiles import remove_tree
    try:
        names = [n for n in os.listdir(layout.runtime) if n.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        path = layout.runtime / name
        try:
            fd = _open_dir(path)
        except OSError:
            continue   # gone meanwhile, or not a directory: not one of ours
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if time.time() - os.fstat(fd).st_mtime >= STALE_AFTER_S:
                remove_tree(path)
        except OSError:
            pass   # held by a live command (EWOULDBLOCK), or not removable now
        finally:
            os.close(fd)


def _open_dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
