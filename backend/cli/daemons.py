"""Unmanaged mode: start the owner and the guardian as detached processes (or attached
with --foreground), each straight from its verified release where it can be, with its
output in its own log, and wait until it answers; a config for the backend they start is
queued here first. backend.cli.down stops everything again in the right order; the
background start of `up --no-wait` is backend.cli.background's, the first release
backend.cli.firstrun's and the wait for a backend backend.cli.backendwait's."""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from protocol.client import Client
from protocol.errors import ConnectFailed, StorageFailed, TenureError, UnsafePath
from protocol.layout import APP_MARKERS, Layout
from protocol.sockets import ensure_private_dir

from .holders import silent_holder, silent_listener
from .owners import trusted_owners
from .upwait import wait_owner_gone

if TYPE_CHECKING:
    import subprocess
    from typing import TypeAlias

    Direct: TypeAlias = "tuple[list[str], dict[str, str]] | None"
    """A daemon's command straight from its verified release, and what to add to its
    environment; None: start the installed code (:func:`_direct`)."""

__all__ = ["UP_POLL_S", "direct_commands", "ensure_daemon", "ensure_daemons", "open_log", "ping",
           "queue_for_backend"]

UP_POLL_S = 0.005
"""How often a starting daemon's socket is looked at. Until the daemon binds it a look is
one stat(2), so a short interval costs nothing and each wait ends within 5 ms of the
daemon being ready (at 20 ms, `tenure up` waited ~10 ms more at each of its waits)."""


def ping(sock: str, timeout: float = 2.0, home: Path | None = None
         ) -> dict[str, Any] | None:
    """The daemon's status if one answers on ``sock`` (a socket of ``home``), else None."""
    if not os.path.exists(sock):
        return None
    # allow_group: owner.sock (system scope) and api.sock (viewer group) may be 0660;
    # owners: guardian.sock and api.sock belong to the service account (system scope)
    owners = None if home is None else trusted_owners(sock, home)
    try:
        with Client(sock, timeout=timeout, connect_timeout=timeout, pin=False,
                    allow_group=True, owners=owners) as c:
            status: dict[str, Any] = c.call("status")
            return status
    except TenureError:
        return None


def ensure_daemons(layout: Layout, foreground: bool,
                   direct: dict[str, Direct] | None = None,
                   spawning: set[str] | None = None) -> dict[str, bool]:
    """Owner and guardian, started side by side when they do not answer (the guardian
    waits for the owner by itself). Returns which ones were started. ``direct``: their
    commands as :func:`direct_commands` verified them a moment ago. ``spawning`` gets
    the name of each one right before it is spawned (so that a caller interrupted
    meanwhile knows whether one may run)."""
    seen: dict[str, bytes] = {}   # both usually run one release: hash it once

    def command(module: str) -> Direct:   # verified only for a daemon to be started
        return _direct(layout, module, seen) if direct is None else direct[module]
    socks = {"owner": layout.owner_sock, "guardian": layout.guardian_sock}
    wanted = {name: _needs_start(layout, name, sock) for name, sock in socks.items()}
    since = {name: _log_end(layout, name) for name in socks}
    spawned: dict[str, subprocess.Popen[bytes] | None] = dict.fromkeys(socks)
    with _daemon_logs(layout, [name for name in socks if wanted[name]]) as logs:
        for name in socks:
            if wanted[name]:
                if spawning is not None:
                    spawning.add(name)
                spawned[name] = _spawn(layout, name, foreground, command, logs[name])
    for name, sock in (("owner", layout.owner_sock), ("guardian", layout.guardian_sock)):
        proc = spawned[name]
        if proc is None:
            continue
        # what this call started is stopped again, this one first (one still running
        # that did not answer in time: a guardian that cannot serve its status, say)
        # and the other beside it: a failed `up` leaves no guardian (and standby
        # backend) waiting for an owner that is not there
        ours = [proc, *(p for n, p in spawned.items() if n != name)]
        _wait_up(layout, name, sock, proc, on_failure=partial(_stop_spawned, ours),
                 since=since[name])
    return {name: proc is not None for name, proc in spawned.items()}


def _stop_spawned(procs: Iterable[subprocess.Popen[bytes] | None],
                  timeout: float = 30.0) -> str:
    """SIGTERM each daemon this command started that still runs and reap it (SIGKILL
    after ``timeout``): what the error then says of it ("" when none ran)."""
    import subprocess
    said = []
    for proc in procs:
        if proc is None or proc.poll() is not None:
            continue
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        said.append(f"pid {proc.pid}")
    return f"; stopped again what this command had started: {', '.join(said)}" if said \
        else ""


def queue_for_backend(layout: Layout, text: str, source: str) -> dict[str, Any]:
    """Queue ``text`` for the backend (backend.queuefile; the backend's spool takes it):
    the record, without the text.
    Raises StorageFailed (nothing was started)."""
    from backend.queuefile import queue
    try:
        ensure_private_dir(layout.backend, root=layout.home)
        return queue(layout.queued_config, text, source)
    except OSError as exc:
        raise StorageFailed(f"cannot queue the config in {layout.queued_config}: "
                            f"{exc.strerror or exc}; nothing was started",
                            {"path": layout.queued_config}) from None


def ensure_daemon(layout: Layout, module: str, sock: str, foreground: bool,
                  timeout: float = 30.0) -> tuple[bool, int | None]:
    """Start ``python -m module --home H`` unless something answers on ``sock``.
    Returns (started, pid). Raises ConnectFailed when it does not come up (with its own
    last lines), once the process started is gone (one that did not answer in
    ``timeout`` is stopped): a caller may then start another in its place."""
    if not _needs_start(layout, module, sock):
        return False, None
    since = _log_end(layout, module)
    with _daemon_logs(layout, [module]) as logs:
        proc = _spawn(layout, module, foreground, lambda m: _direct(layout, m, {}),
                      logs[module])
    _wait_up(layout, module, sock, proc, timeout, partial(_stop_spawned, [proc]), since)
    return True, proc.pid


def _log_end(layout: Layout, module: str) -> int:
    """Where ``module``'s log ends now: a daemon started next writes after it."""
    try:
        size = os.stat(layout.logs / f"{module}.log", follow_symlinks=False).st_size
    except OSError:
        size = 0   # none yet: the daemon's lines begin the log
    return size


def _needs_start(layout: Layout, module: str, sock: str) -> bool:
    """Whether daemon ``module`` must be started: nothing answers on ``sock``, or the
    owner that answers is shutting down (waited for: a guardian started beside it would
    pin an owner about to go, and refuse the next one). Raises ConnectFailed when one
    of ours accepts there but does not answer (stopped, stuck): a second one would be
    refused (it finds the first), and the error would name it; OperationInProgress
    when a shutting-down owner outlives its shutdown's budget."""
    answer = ping(sock, home=layout.home)
    if answer is not None and module == "owner" and answer.get("draining") is True:
        wait_owner_gone(answer)
        return True
    if answer is not None:
        return False
    silent = silent_listener(sock, module, "Nothing was started") or \
        silent_holder(sock, module, "Nothing was started")
    if silent is not None:
        raise silent
    return True


def _spawn(layout: Layout, module: str, foreground: bool,
           command: Callable[[str], Direct], log: int) -> subprocess.Popen[bytes]:
    """Start daemon ``module`` with its stdout and stderr appended to ``log`` (its log,
    opened by :func:`open_log`)."""
    argv, env = command(module) or ([sys.executable, "-m", module, "--home", str(layout.home)], {})
    import subprocess  # `up --no-wait` returns before it needs it

    # a daemon started from an app's shell (a deploy job's `tenure up`) is no app: it
    # must not carry the marks a reconcile finds an app's processes by (owner.evidence)
    clean = {k: v for k, v in {**os.environ, **env}.items() if k not in APP_MARKERS}
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=not foreground, close_fds=True, env=clean)


@contextmanager
def _daemon_logs(layout: Layout, modules: list[str]) -> Iterator[dict[str, int]]:
    """The logs of daemons ``modules`` (logs/MODULE.log), all opened by :func:`open_log`
    before any of them is started: one that may not be used starts neither. Closed on
    leaving (each daemon holds its own copy). None to start: nothing is touched (the
    daemons may run under systemd, in a home of the service account's)."""
    fds: dict[str, int] = {}
    if not modules:
        yield fds
        return
    ensure_private_dir(layout.logs, root=layout.home)
    try:
        for module in modules:
            fds[module] = open_log(layout.logs / f"{module}.log")
        yield fds
    finally:
        for fd in fds.values():
            os.close(fd)


def open_log(path: Path) -> int:
    """A descriptor appending to the log at ``path``, created 0600 when absent. Never
    followed through a symlink, nor changed: a symlink, a file that is not a regular
    one, another user's or one open to others is refused (the daemon's lines, with what
    they say of apps, would go where someone else chose, or be read by others) and
    left as it is, for the operator to look at. Raises UnsafePath naming the path."""
    p = str(path)
    try:   # O_NONBLOCK: a FIFO put there is refused below instead of waited on
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW |
                     os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        what = "is a symlink" if exc.errno == errno.ELOOP else \
            f"cannot be opened safely: {exc.strerror}"
        raise UnsafePath(f"{p} {what}; find out who put it there, then move it away "
                         "(nothing was started)", {"path": p}) from None
    from protocol.durable import refuse_unprivate  # `status` imports this module, not it
    try:
        refuse_unprivate(p, os.fstat(fd))
    except UnsafePath:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    return fd


def direct_commands(layout: Layout) -> dict[str, Direct]:
    """The owner's and the guardian's commands by :func:`_direct` (their release hashed
    once when they run the same one)."""
    seen: dict[str, bytes] = {}
    return {module: _direct(layout, module, seen) for module in ("owner", "guardian")}


def _direct(layout: Layout, module: str, seen: dict[str, bytes]) -> Direct:
    """The daemon started straight from the release its record names, verified here as
    its own start would verify it before exec'ing into it: without that first
    interpreter (~0.1 s of imports and hashing per daemon, both at once on a cold `up`);
    with what to add to its environment (the guardian: the tree's identity as hashed
    here, guardian.start.hashed_env). None when the record names none, when the daemon
    has something to decide (a guardian's trial to go back from) or when the release
    does not verify: the installed code then starts, decides, verifies again and
    reports why, as it always did."""
    try:
        if module == "owner":
            from owner.release import direct_command as owner_command
            argv = owner_command(layout, "INFO", seen)
            return None if argv is None else (argv, {})
        if module == "guardian":
            from guardian.paths import GuardianPaths
            from guardian.start import direct_command as guardian_command
            from guardian.start import hashed_env
            paths = GuardianPaths(layout.home)
            argv = guardian_command(paths, "INFO", seen)
            return None if argv is None else (argv, hashed_env(paths, seen))
    except (TenureError, OSError):   # whatever it is, the installed code says it properly
        pass
    return None


def _wait_up(layout: Layout, module: str, sock: str, proc: subprocess.Popen[bytes],
             timeout: float = 30.0, on_failure: Callable[[], str] = lambda: "",
             since: int = 0) -> None:
    """Return once ``module`` answers on ``sock``. Raises ConnectFailed when it exits or
    does not answer in ``timeout``, after ``on_failure`` (what it did is said before the
    log's tail: the daemon's last words stay the message's last line). The tail is the
    whole lines it wrote after byte ``since`` of its log (where the log ended when it
    was started), also given as ``data.last_lines``."""
    log_path = layout.logs / f"{module}.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ping(sock, home=layout.home) is not None:
            return
        if proc.poll() is not None:
            break
        time.sleep(UP_POLL_S)
    from protocol.durable import last_words
    code = proc.poll()
    said = on_failure()   # first: a process it stops may still write its last lines
    tail = last_words(log_path, since=since)
    how = f"exit {code}" if code is not None else \
        f"it did not answer on {sock} within {timeout:g} s"
    raise ConnectFailed(f"{module} did not come up ({how}){said}; "
                        f"end of {log_path}:\n{tail}",
                        {"log": str(log_path), "last_lines": tail})
