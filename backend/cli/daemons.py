"""Unmanaged mode: start the owner and the guardian as detached processes (or attached
with --foreground); backend.cli.down stops everything again in the right order."""

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
from protocol.errors import (
    BackendUnavailable,
    BadRequest,
    ConnectFailed,
    OperationInProgress,
    RecoveryBlocked,
    RequestTimedOut,
    StorageFailed,
    TenureError,
    UnsafePath,
)
from protocol.layout import APP_MARKERS, Layout
from protocol.sockets import ensure_private_dir

from .holders import silent_holder, silent_listener
from .owners import trusted_owners
from .sealtmp import sealed_here, sweep
from .upwait import wait_owner_gone

if TYPE_CHECKING:
    import subprocess
    from typing import TypeAlias

    from .early import Early

    Direct: TypeAlias = "tuple[list[str], dict[str, str]] | None"
    """A daemon's command straight from its verified release, and what to add to its
    environment; None: start the installed code (:func:`_direct`)."""

__all__ = ["ensure_backend", "ensure_daemon", "ensure_daemons", "ping",
           "place_first_release"]

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


class Prestart:
    """The child of an `up --no-wait` that verifies the release while the command reads
    and parses the config, then waits for the command's word (:func:`prestart`).
    ``lock``: runtime/up.lock as locked here, an open file the child shares (one forked
    by backend.cli.early), else -1 (the child holds its own)."""

    def __init__(self, pid: int, word: int, lock: int = -1) -> None:
        self.pid, self._word, self._lock = pid, word, lock

    def go(self) -> None:
        """Let it start the daemons. Raises OSError when it is gone (its own failure is
        in logs/up.log)."""
        try:
            os.write(self._word, b"g")
        finally:
            self.cancel()

    def cancel(self) -> None:
        """It starts nothing and exits (what a config that does not parse, a queue that
        cannot be written, or a command that dies does): its pipe closes. Either way the
        lock stays with it until it has exited."""
        for fd in (self._word, self._lock):
            if fd >= 0:
                os.close(fd)
        self._word = self._lock = -1


def prestart(layout: Layout, early: Early | None = None) -> Prestart | None:
    """`tenure up --no-wait` on a home whose daemons all are down and whose guardian has
    a release selected: the child that will start them, ``early`` (forked as the
    command started, backend.cli.early) or one forked now (:func:`in_background`); it
    verifies the release beside the command's own work, and starts the owner and the
    guardian once :meth:`Prestart.go` says so. None when something answers or the home
    has no release selected yet (``early`` is cancelled then): `up` then does what it
    always does, and only leaves the apply running. Raises StorageFailed when it cannot
    fork (nothing was started)."""
    if not _selected(layout) or any(
            ping(sock, home=layout.home) is not None
            for sock in (layout.owner_sock, layout.guardian_sock, layout.api_sock)):
        if early is not None:
            early.cancel()
        return None
    if early is not None and (adopted := _adopt(layout, early)) is not None:
        return adopted
    told, word = os.pipe()

    def work() -> bool:
        os.close(word)   # else its own copy would keep the pipe from ever closing
        return _start_when_told(layout, told)
    try:   # the child waits for them to answer (or reports why not in logs/up.log)
        pid = in_background(layout, work)
    except OSError as exc:
        os.close(word)
        raise StorageFailed(f"cannot start the daemons in the background: "
                            f"{exc.strerror or exc}; nothing was started", {}) from None
    finally:
        os.close(told)
    return Prestart(pid, word)


WORD_WAIT_S = 60.0
"""How long the child of `up --no-wait` waits for its command's word before it gives
up, starting nothing (the command reads and parses the config meanwhile)."""
FRESH_S = 1.0
"""A verification older than this when the word comes is done again before the
daemons start from the release (the word usually comes within ~0.1 s)."""


def _adopt(layout: Layout, early: Early) -> Prestart | None:
    """``early``'s child as this command's, runtime/up.lock locked on the open file it
    shares (:class:`Prestart`); None, ``early`` cancelled, when it was forked for
    another home or has exited (it could not open up.log, say: a child forked now
    reports why)."""
    import fcntl
    if early.home != os.path.normpath(layout.root) or not early.alive():
        early.cancel()
        return None
    pid, word, lock = early.hand_over()
    fcntl.flock(lock, fcntl.LOCK_EX)
    return Prestart(pid, word, lock)


def early_child(layout: Layout, told: int) -> bool:
    """In the child backend.cli.early forked: what :func:`in_background`'s child does,
    on a home the command has not checked yet (it refuses an unsafe one first), with
    :func:`_start_when_told` as the work. False when it failed."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):   # not the command's: a pipe it writes to stays open until
        os.dup2(null, fd)  # the command exits, not until this child does
    from protocol.sockets import refuse_unsafe_home
    refuse_unsafe_home(layout.root)
    ensure_private_dir(layout.logs, root=layout.home)
    return _background(open_log(layout.logs / "up.log"),
                       lambda: _start_when_told(layout, told))


def _start_when_told(layout: Layout, told: int) -> bool:
    """In the child: the daemons' commands verified first, then the command's word;
    False (nothing started) when the command closed its end without it or said
    nothing within :data:`WORD_WAIT_S`."""
    import select
    direct = direct_commands(layout)
    verified = time.monotonic()
    if not select.select([told], [], [], WORD_WAIT_S)[0]:
        os.write(1, f"{time.strftime(_STAMP)} no word from the command in "
                    f"{WORD_WAIT_S:.0f} s: nothing started\n".encode())   # up.log
        return False
    if os.read(told, 1) != b"g":
        return False
    if time.monotonic() - verified > FRESH_S:   # the command took long: verify again
        direct = direct_commands(layout)
    ensure_daemons(layout, False, direct)
    return True


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


def start_queued(layout: Layout, early: Prestart, text: str | None, source: str | None
                 ) -> dict[str, Any]:
    """Queue ``text`` for the backend (backend.spool), then let ``early`` start the
    owner and the guardian; returns without waiting for them."""
    queued = None
    if text is not None and source is not None:
        try:
            queued = queue_for_backend(layout, text, source)
        except StorageFailed:
            early.cancel()
            raise
    try:
        early.go()
    except OSError as exc:
        then = "; run `tenure up` (the config stays queued for the backend)" if queued \
            else ""
        raise StorageFailed(f"cannot start the daemons in the background: "
                            f"{exc.strerror or exc}{then}", {"queued": queued}) from None
    return {"starting": ["owner", "guardian"], "queued": queued}


def in_background(layout: Layout, work: Any) -> int:
    """Run ``work()`` in a child of this process and return its pid at once, as a
    daemon's start returns once it has forked: the release is verified, the daemons
    spawned and waited for there, after the command has answered. The child has its
    own session, reads nothing, writes to ``logs/up.log`` (0600), where an error is
    left with its traceback (a daemon that did not come up: the end of its log), and
    holds ``runtime/up.lock`` until ``work`` ends; it exits 0 once ``work`` returned,
    1 otherwise. A ``work`` that returns False started nothing: no record is written."""
    import fcntl
    ensure_private_dir(layout.logs, root=layout.home)
    ensure_private_dir(layout.runtime, root=layout.home)
    log_fd = open_log(layout.logs / "up.log")
    # taken here, held by the child (the same open file) until it has started them:
    # a `tenure down` or `up` meanwhile waits for it (wait_background_start)
    lock_fd = os.open(layout.up_lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW |
                      os.O_CLOEXEC, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:   # no child: the lock is let go at once
        _close_all(log_fd, lock_fd)
        raise
    if pid:
        _close_all(log_fd, lock_fd)   # the child holds them now
        return pid
    ok = False
    try:
        os.setsid()
        # the command's own handlers (main._said_on_termination) are not the child's
        import signal
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        ok = _background(log_fd, work)
    finally:
        os._exit(0 if ok else 1)


def _background(log_fd: int, work: Callable[[], object]) -> bool:
    """The child's side of :func:`in_background`: reads nothing, writes to ``log_fd``,
    runs ``work`` and records how it ended. False when ``work`` raised."""
    import traceback
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        if work() is not False:
            os.write(log_fd, f"{time.strftime(_STAMP)} {_BACKGROUND}: {_DONE}\n".encode())
        return True
    except BaseException:
        os.write(log_fd, (f"{time.strftime(_STAMP)} {_BACKGROUND}: {_FAILED}\n" +
                          traceback.format_exc()).encode())
        return False


def _close_all(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


_STAMP = "%Y-%m-%dT%H:%M:%S"
_BACKGROUND = "tenure up --no-wait"
_DONE = "the daemons answer"
_FAILED = "starting the daemons failed"


def last_background_start(layout: Layout) -> dict[str, Any] | None:
    """How the last background start of `tenure up --no-wait` ended, from the end of
    ``logs/up.log``: ``{"at", "ok"}``, with ``error`` (the log's last line: the daemon's
    own last words when it did not come up) when it failed. None when there is none or
    the log cannot be read safely (for `tenure status` with no backend to ask)."""
    from protocol.durable import read_private
    try:
        data = read_private(layout.logs / "up.log", tail=16384)
    except (OSError, TenureError):
        return None
    lines = [line for line in data.decode(errors="replace").splitlines() if line.strip()]
    marks = [i for i, line in enumerate(lines) if f" {_BACKGROUND}: " in line]
    if not marks:
        return None
    head = lines[marks[-1]]
    at, _, what = head.partition(f" {_BACKGROUND}: ")
    if what == _DONE:
        return {"at": at, "ok": True}
    return {"at": at, "ok": False, "error": lines[-1].strip()}


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
        _close_all(*fds.values())


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


def _selected(layout: Layout) -> bool:
    """Whether the guardian's state names a selected release (read only; False when it
    cannot be read: the waiting path then says why)."""
    import sqlite3

    from protocol.durable import read_rows
    try:
        rows = read_rows(layout.guardian_db, "SELECT current FROM selector")
    except (sqlite3.Error, TenureError):
        return False
    return bool(rows and rows[0][0])


def place_first_release(layout: Layout, sealed: Path | None) -> Path | None:
    """On a fresh home (no guardian state, no daemon answering): install the first
    release (``sealed``, or one sealed from the installed tenure) into runtime/releases
    and record it as the code the owner and the guardian run, before they start, so
    that both start from it. Returns the installed release's path, or None when the
    home is not fresh. Raises what sealing and installing raise."""
    if os.path.exists(layout.guardian_db) or ping(layout.owner_sock, home=layout.home) \
            or ping(layout.guardian_sock, home=layout.home):
        return None
    from guardian.own import Pointer
    from guardian.own import save as save_guardian_release
    from guardian.paths import GuardianPaths
    from guardian.trust import install_trusted
    from owner.release import OwnerRelease
    from owner.release import save as save_owner_release
    paths = GuardianPaths(layout.home)
    for d in (layout.execution, layout.releases):
        ensure_private_dir(d, root=layout.home)
    sweep(layout)
    if sealed is not None:
        path = install_trusted(paths, sealed.absolute()).path
    else:
        with sealed_here(layout) as src:
            path = install_trusted(paths, src).path
    save_guardian_release(paths.guardian_release, Pointer(path.name))
    save_owner_release(layout.owner_release, OwnerRelease(path.name))
    return path


def ensure_release(layout: Layout, guardian: Client, sealed: Path | None = None,
                   timeout: float = 120.0) -> str | None:
    """When no release is selected (first run): install ``sealed``, or seal the installed
    tenure, and select it, which starts the first backend generation: waited for up to
    ``timeout`` (the guardian retries a start that fails, with backoff; a start still
    under way is then :func:`ensure_backend`'s to wait for, or to explain). Returns the
    release this call selected, None when it selected none (one was selected, by
    another `up` at the same time too, or by the guardian's boot for the generation it
    adopted). Selects nothing while the guardian holds a living generation, or may
    still adopt one (:func:`_settled`): a select is refused beside it."""
    sweep(layout)   # every `up`: a seal tree an interrupted one left (11 MB) goes
    deadline = time.monotonic() + timeout
    st = _settled(layout, guardian, deadline)
    if st["selector"]["current"] is not None or _holds_live(st):
        return None   # a generation it holds runs: a select would be refused beside it
    if sealed is not None:
        rid = guardian.call("release.install", {"path": str(sealed.absolute())},
                            timeout=300)["release"]
    else:
        with sealed_here(layout) as src:
            rid = guardian.call("release.install", {"path": str(src)}, timeout=300)["release"]
    try:
        answer = _select_first(guardian, str(rid), timeout)
    except RequestTimedOut:
        return str(rid)   # selected; the start goes on in the guardian
    except BadRequest:
        st = guardian.call("status")   # a generation came meanwhile, or its release
        if st["selector"]["current"] is not None or _holds_live(st):
            return None
        raise
    # another `up` at the same time selected it first, and its backend runs
    return None if answer.get("started") is False else str(rid)


def _settled(layout: Layout, guardian: Client, deadline: float) -> dict[str, Any]:
    """The guardian's status once no release is selected only because none is: a
    guardian that has just started answers before it boots, and its boot adopts a
    generation that outlived the guardian before it and, when its record selects
    nothing (a new state.db beside a damaged one set aside), selects the release that
    generation runs, which is often not the installed code (any home upgraded since).
    So while it boots or another command runs (it holds its command lock), or while a
    generation answers on api.sock that it does not hold, it is asked again every 50 ms
    until ``deadline``; the status it gave last then. Raises what asking it raises."""
    while True:
        st: dict[str, Any] = guardian.call("status")
        if st["selector"]["current"] is not None or time.monotonic() >= deadline or \
                not _may_adopt(layout, st):
            return st
        time.sleep(0.05)


def _may_adopt(layout: Layout, st: dict[str, Any]) -> bool:
    """Whether the guardian whose status is ``st`` may still take up a generation (and
    select its release): it holds its command lock (its boot, or a start under way), or
    a generation answers on api.sock that it does not hold (it has not booted yet)."""
    if st.get("handoff_in_progress"):
        return True
    live = ping(layout.api_sock, home=layout.home)
    if live is None:
        return False
    held = (st.get("backend") or {}).get("pid")
    return held is None or held != (live.get("backend") or {}).get("pid")


def _holds_live(st: dict[str, Any]) -> bool:
    """Whether the guardian whose status is ``st`` holds a living generation."""
    return bool((st.get("backend") or {}).get("alive"))


def _select_first(guardian: Client, rid: str, timeout: float) -> dict[str, Any]:
    """Select the first release, once the guardian's own start lets it: it answers on
    its socket before it has connected to the owner and booted, and holds its command
    lock while it boots, refusing a select meanwhile (OPERATION_IN_PROGRESS), for a
    moment or, on a busy machine, longer. Asked again every 50 ms within ``timeout``.
    Returns its answer. Raises what the select raises."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer: dict[str, Any] = guardian.call(
                "release.select", {"release": rid, "start": True},
                timeout=max(deadline - time.monotonic(), 0.001))
            return answer
        except OperationInProgress:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def ensure_backend(layout: Layout, timeout: float, waited: float | None = None,
                   kept: bool = False, granted: bool = False) -> dict[str, Any]:
    """Wait until a backend generation answers and is ready. Raises RecoveryBlocked as
    soon as the guardian has given up starting one (why, and what to do), else
    BackendUnavailable after ``timeout`` with why its last start failed (``waited``: the
    whole wait to name there, when part of it was spent before). The guardian is first
    asked GUARDIAN_LOOK_S in: a backend that comes up sooner costs it nothing.
    ``kept`` (a guardian this command just started): only a backend that guardian holds
    in control counts; one that outlived its guardian may be about to be retired
    (guardian.boot: attached to an owner instance that is gone). ``granted`` (an owner
    this command just started beside a running guardian): only the backend the owner's
    grant names counts; the one that answered before is attached to the owner that died,
    until the guardian moves control (about a second)."""
    deadline = time.monotonic() + timeout
    look = time.monotonic() + GUARDIAN_LOOK_S
    st, held = None, Held()
    while time.monotonic() < deadline:
        st = ping(layout.api_sock, home=layout.home)
        if st is not None and (not kept or _held(layout, st)) and \
                (not granted or _granted(layout, st)):
            return st
        if time.monotonic() >= look:
            view = guardian_view(layout)
            _refuse_if_blocked(view)
            held.check(view)
            look = time.monotonic() + GUARDIAN_LOOK_S
        time.sleep(UP_POLL_S if st is None else HELD_POLL_S)
    view = guardian_view(layout)
    _refuse_if_blocked(view)
    what = "no backend answered" if st is None else \
        (f"the backend that answers (pid {(st.get('backend') or {}).get('pid')}) is not "
         "held by the guardian")
    raise BackendUnavailable(f"{what} on {layout.api_sock} within "
                             f"{timeout if waited is None else waited:g} s"
                             f"{_last_failure(view)}; see "
                             "`tenure backend status`")


class Held:
    """A backend the wait finds stopped (SIGSTOP, a debugger) for :data:`HELD_S`: it is
    alive, so the guardian does not replace it, and no answer comes until it is
    continued; `up` waited its whole --timeout, silent when piped."""

    def __init__(self) -> None:
        self.since: float | None = None

    def check(self, view: dict[str, Any] | None) -> None:
        """Raises BackendUnavailable naming the stopped backend once it was for HELD_S."""
        from .render_backend import stopped_backend
        said = stopped_backend(view)
        if said is None:
            self.since = None
            return
        self.since = time.monotonic() if self.since is None else self.since
        if time.monotonic() - self.since >= HELD_S:
            pid = ((view or {}).get("backend") or {}).get("pid")
            raise BackendUnavailable(f"the backend does not answer and none comes until it "
                                     f"is continued: {said}",
                                     {"pid": pid, "backend_stopped": True})


HELD_S = 5.0            # a backend stopped this long ends a wait for one
GUARDIAN_LOOK_S = 0.5   # how often a wait for the backend asks the guardian how it goes
HELD_POLL_S = 0.02      # and, once one answers, whether the guardian holds it (``kept``)


def _held(layout: Layout, st: dict[str, Any]) -> bool:
    """Whether the guardian holds the backend that answered ``st`` in control (it has
    adopted it or started it); False while it does not answer."""
    held = (guardian_view(layout) or {}).get("backend") or {}
    return held.get("pid") is not None and held.get("pid") == (st.get("backend") or {}).get("pid")


def _granted(layout: Layout, st: dict[str, Any]) -> bool:
    """Whether the backend generation that answered ``st`` is attached to the owner
    that answers now and named by its grant. A new owner starts with the grant its
    records hold, which names the generation attached to the owner before it."""
    owner = ping(layout.owner_sock, home=layout.home) or {}
    grant = owner.get("grant") or {}
    mine = (owner.get("owner") or {}).get("instance")
    return grant.get("activation") is not None and mine is not None and \
        grant.get("activation") == (st.get("backend") or {}).get("activation") and \
        (st.get("owner") or {}).get("instance") == mine


def guardian_view(layout: Layout) -> dict[str, Any] | None:
    """The guardian's status, or None when it does not answer."""
    return ping(layout.guardian_sock, home=layout.home)


def _refuse_if_blocked(view: dict[str, Any] | None) -> None:
    blocked = (view or {}).get("blocked")
    if isinstance(blocked, dict):
        code = blocked.get("code")
        why = blocked.get("reason") if code in (None, "RECOVERY_BLOCKED") else \
            f"{code}: {blocked.get('reason')}"   # the cause's own code, said: UNSAFE_PATH
        then = blocked.get("next") or "once that is fixed, run `tenure backend recover`"
        raise RecoveryBlocked(f"the guardian gave up starting a backend: {why}; {then}",
                              {"cause": code})


def backend_probe(layout: Layout) -> Any:
    """What a wait for the backend waits on, for ``tenure up``'s progress line: the
    guardian's failing streak or silent backend (_last_failure), else the activation
    under way (``start: spawning``), else 'waiting for the guardian'."""
    def probe() -> str:
        view = guardian_view(layout)
        if view is None:
            return "waiting for the guardian"
        why = _last_failure(view)
        if why:
            return why[2:]
        act = view.get("last_activation") or {}
        if act.get("outcome") is None and act.get("phase"):
            return f"backend {act.get('kind')}: {act['phase']}"
        return "waiting for the backend"
    return probe


def _last_failure(view: dict[str, Any] | None) -> str:
    """'; the backend (pid N) is alive but NOT ANSWERING …' when the guardian's last
    probe of its living generation got no answer (it may be hung); '; recovery is
    failing: attempt N of M ended WHY …' while the guardian waits to retry after a failed
    start or a generation that crashed soon after it started; else '; its last start
    failed: WHY (the guardian tries again)', or '' when the most recent activation did
    not fail or the guardian does not say."""
    from .render_backend import not_answering, recovery_failing, why_silent
    backend = (view or {}).get("backend") or {}
    silent = not_answering(backend)
    if silent is not None:
        return (f"; the backend (pid {backend.get('pid')}) is alive but {silent}: "
                f"{why_silent(backend.get('pid'))}")
    failing = (view or {}).get("recovery_failing")
    if isinstance(failing, dict):
        # the streak says more than the last activation, which may have succeeded (a
        # generation that reached READY and crashed a second later) or be the next
        # attempt, still under way
        return f"; {recovery_failing(failing)}"
    recent = (view or {}).get("recent") or []
    last = recent[0] if recent and isinstance(recent[0], dict) else {}
    if last.get("outcome") in (None, "success") or not last.get("error"):
        return ""
    return f"; its last start failed: {last['error']} (the guardian tries again)"
