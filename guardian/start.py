"""Starting the guardian: its lock, the release it runs, and the serve loop.

Kept apart from guardian.daemon on purpose: a guardian whose recorded release is not the
code it runs execs into that release before it imports the serving machinery (asyncio,
the coordinator, the signing key), which is most of a start's time and would
otherwise be paid twice. A self-upgrade returns here from ``serve`` and execs the same way.

Exit statuses: 0 clean stop, 2 unsafe or unreadable state, 5 another guardian runs.
"""

from __future__ import annotations

import logging
import os

from protocol.errors import AlreadyRunning, GuardianUpgradeFailed, StateCorrupt, TenureError
from protocol.flocks import hold, take
from protocol.startup import import_asyncio_without_tls
from protocol.storage import storage_failure

from . import own
from .paths import GuardianPaths

__all__ = ["direct_command", "run"]

log = logging.getLogger("tenure.guardian")


def _lock(paths: GuardianPaths, inherited: int | None = None) -> int:
    """Hold runtime/guardian.lock: open it, or take over the descriptor the guardian
    that exec'd into this one kept (it must be that very file)."""
    if inherited is not None:
        return _inherit_lock(paths, inherited)
    fd = hold(paths.lock)
    if fd is None:
        raise AlreadyRunning(f"another guardian runs on {paths.home}")
    return fd


def _inherit_lock(paths: GuardianPaths, fd: int) -> int:
    try:
        held, there = os.fstat(fd), os.lstat(paths.lock)
    except OSError as exc:
        raise StateCorrupt(f"inherited lock descriptor {fd}: {exc.strerror}") from None
    if (held.st_dev, held.st_ino) != (there.st_dev, there.st_ino):
        raise StateCorrupt(f"inherited descriptor {fd} is not {paths.lock}", {"fd": fd})
    if not take(fd):   # ours already: the same open file
        raise AlreadyRunning(f"another guardian runs on {paths.home}")
    os.set_inheritable(fd, False)
    return fd


def _exec(paths: GuardianPaths, release_id: str, lock_fd: int) -> TenureError:
    """Replace this process with the guardian of ``release_id`` (verified now), handing
    it the lock; returns only when that fails, with the reason."""
    from .release import exec_release
    try:
        from .trust import verified_release
        rel = verified_release(paths, release_id)
        log.info("the guardian continues from release %s (same pid %d)", release_id,
                 os.getpid())
        os.set_inheritable(lock_fd, True)
        failed = exec_release(rel, "--home", str(paths.home), "--inherit-lock", str(lock_fd),
                              "--log-level",
                              logging.getLevelName(logging.getLogger().level),
                              module="guardian")
        err: TenureError = GuardianUpgradeFailed(
            f"cannot execute the guardian of release {release_id}: {failed.strerror}",
            {"release": release_id, "step": "exec"})
    except TenureError as exc:
        err = exc
    finally:
        os.set_inheritable(lock_fd, False)
    log.error("the guardian stays on the code it runs: %s", err)
    return err


def direct_command(paths: GuardianPaths, log_level: str,
                   seen: dict[str, bytes] | None = None) -> list[str] | None:
    """``python -m guardian`` run straight from the release the record selects, verified
    now as :func:`_exec` verifies it: for a caller that would otherwise start the
    installed code only for it to exec into that release (`tenure up`). None when the
    start has something to decide (nothing selected, or a trial to go back from): the
    installed guardian then starts and decides under its lock. Raises what the
    verification raises. ``seen``: see :func:`guardian.release.verify`."""
    record = own.load(paths.guardian_release)
    if record.state is not own.State.SELECTED or record.release is None:
        return None
    from .release import command
    from .trust import verified_release
    return command(verified_release(paths, record.release, seen), "--home",
                   str(paths.home), "--log-level", log_level, module="guardian")


HASHED_ENV = "TENURE_GUARDIAN_HASHED"


def hashed_env(paths: GuardianPaths, seen: dict[str, bytes]) -> dict[str, str]:
    """For the environment of a guardian :func:`direct_command` starts: the identity of
    its release's tree as the verification hashed it (see :func:`hashed_memo`); an
    environment variable, which a guardian of an older release ignores."""
    record = own.load(paths.guardian_release)
    identity = None if record.release is None else \
        seen.get(str(paths.releases / record.release))
    return {} if identity is None else {HASHED_ENV: identity.hex()}


def hashed_memo(paths: GuardianPaths) -> dict[str, bytes]:
    """The first entry of the guardian's memo of hashed trees (guardian.release.verify's
    ``seen``), taken out of the environment (no child inherits it): the identity of the
    release it runs from, as the `tenure up` that verified that release before starting
    the guardian from it hashed it (:func:`hashed_env`). Its first standby, of the same
    release, is then not hashed a second time a moment later unless a file changed
    meanwhile: its identity then differs, and it is hashed in full. Empty when absent,
    not 32 bytes of hex, or this is the installed code."""
    given = os.environ.pop(HASHED_ENV, None)
    running = own.running_release(paths.releases)
    if given is None or running is None or len(given) != 64:
        return {}
    try:
        return {str(paths.releases / running): bytes.fromhex(given)}
    except ValueError:
        return {}


def _fault_point(point: str) -> None:
    """Test-only (guardian.faults): a fault named for ``point`` fires here; nothing is
    imported unless TENURE_GUARDIAN_FAULT is set."""
    if os.environ.get("TENURE_GUARDIAN_FAULT"):
        from .faults import Fault
        Fault().at(point, lambda role: None)


EXIT_INTERNAL = 7   # what it did not expect ended it (logged with its cause)


def run(paths: GuardianPaths, inherited_lock: int | None = None,
        hashed: dict[str, bytes] | None = None) -> int:
    try:
        paths.prepare()
        fd = _lock(paths, inherited_lock)
        mine = own.Running.start(paths, own.running_release(paths.releases))
        if mine.follow is not None:
            mine.exec_failed(paths, _exec(paths, mine.follow, fd))
        _fault_point("start.locked")
        import_asyncio_without_tls()
        import asyncio

        from .daemon import serve
        while True:
            target = asyncio.run(serve(paths, mine, hashed or {}))
            if target is None:
                return 0
            mine.exec_failed(paths, _exec(paths, target, fd))
    except AlreadyRunning as exc:
        log.error("%s", exc)
        return 5
    except TenureError as exc:
        log.error("%s", exc)
        return 2
    except Exception as exc:   # boundary: the unexpected ends coded, with its cause
        stored = storage_failure(exc, "the guardian")
        if stored is not None:   # a full or failing disk: said as such, no traceback
            log.error("%s", stored)
            return 2
        log.critical("INTERNAL: the guardian could not go on: %s: %s", type(exc).__name__,
                     exc, exc_info=exc)
        return EXIT_INTERNAL
