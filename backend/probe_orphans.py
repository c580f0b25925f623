"""Exec probes never outlive the backend that ran them.

A probe runs in a session of its own (:mod:`backend.probe_exec`) and its pid is known
only to the backend that started it. That backend ends it however the probe ends, but a
backend killed by SIGKILL while a probe runs ends nothing: the probe is re-parented to
init and runs on (a ``timeout = 600`` check for ten minutes, one that never exits for
good), beside the copy the recovered backend starts; nothing else would ever end it.

So every probe carries :data:`PROBE_ENV` = ``HOME_ID:PID:TICKS`` in its environment
(:func:`probe_env`): the home of the backend that runs it
(:func:`protocol.layout.home_id`) and that backend's pid and start ticks. The processes
a probe starts inherit it. When a generation starts serving,
:func:`end_orphaned_probes` runs :func:`sweep` once in the background: every process of
this uid and PID namespace carrying this home's marker whose backend (pid and start
ticks) no longer runs is SIGKILLed. A probe whose backend still runs is never touched:
during a hot handoff the old generation runs its own probes until it retires, and ends
them itself. What the sweep cannot see: a process that cleared its environment, and one
between its fork and exec at the moment its /proc/PID/environ is read.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Mapping

from protocol import procfs
from protocol.identity import Identity
from protocol.layout import home_id

__all__ = ["PROBE_ENV", "Marker", "end_orphaned_probes", "mark", "orphans", "parse",
           "probe_env", "sweep"]

log = logging.getLogger("tenure.backend")

PROBE_ENV = "TENURE_PROBE"
"""Set in every exec probe's environment: ``HOME_ID:PID:TICKS`` of the backend running
it (HOME_ID is ``DEV:INODE``, so the value has four fields)."""

Marker = tuple[str, int, int]
"""(home id, backend pid, backend start ticks), as a probe's :data:`PROBE_ENV` says."""

_value: str | None = None   # this backend's PROBE_ENV value, once it is marked (mark)
_sweeping: set[asyncio.Task[None]] = set()   # the loop keeps only a weak reference


def mark(home: str, backend: Identity) -> str | None:
    """From now on, every probe this process starts carries this home and ``backend``'s
    identity (:func:`probe_env`); the value, or None (logged) when the home cannot be
    identified: probes then carry no marker, and no sweep can find them."""
    global _value
    hid = home_id(home)
    if not hid:
        log.warning("exec probes: the home cannot be identified (stat failed): a probe "
                    "running when this backend dies would not be ended by the next one")
        _value = None
        return None
    _value = f"{hid}:{backend.pid}:{backend.start_ticks}"
    return _value


def probe_env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    """The environment of a probe given ``env`` (None: this process's), with the marker
    first, whatever ``env`` says of it: an app's env cannot replace it, and the sweep
    finds it within the first bytes of /proc/PID/environ, which it reads no further than
    protocol.procfs.environ does (an environment larger than that once hid a marker
    placed last, or cut it into one naming no backend: a live backend's probe was
    ended). ``env`` itself (None kept) when this process is not marked (:func:`mark`)."""
    if _value is None:
        return None if env is None else dict(env)
    given = os.environ if env is None else env
    return {PROBE_ENV: _value, **{k: v for k, v in given.items() if k != PROBE_ENV}}


def parse(value: bytes) -> Marker | None:
    """The :data:`Marker` of a PROBE_ENV value (the bytes after ``NAME=``); None when it
    is malformed (a value some process set itself)."""
    hid, _, rest = value.decode("ascii", "replace").rpartition(":")
    hid, _, pid = hid.rpartition(":")
    if not hid or not pid.isdigit() or not rest.isdigit():
        return None
    return hid, int(pid), int(rest)


def _marker_of(pid: str) -> Marker | None:
    """The marker in ``pid``'s environment; None when it carries none or its environment
    cannot be read (gone, another user's)."""
    prefix = f"{PROBE_ENV}=".encode()
    for var in procfs.environ(pid) or ():
        if var.startswith(prefix):
            return parse(var[len(prefix):])
    return None


def _ours(pid: str) -> bool:
    """Whether ``pid`` runs as our uid (any, for root: `tenure down` of a system home
    runs as root, the probes as the service's account) in our PID namespace: a marker's
    pid names a backend of the namespace the probe runs in, so one seen from outside it
    cannot be judged (False too when /proc does not say). A marker is set by the process
    itself, so a forged one only ever ends its own process."""
    try:
        same_ns = os.readlink(f"{procfs.PROC}/{pid}/ns/pid") == \
            os.readlink(f"{procfs.PROC}/self/ns/pid")
    except OSError:
        return False
    return same_ns and os.geteuid() in (0, procfs.status_uid(int(pid)))


def orphans(home: str) -> list[tuple[int, int]]:
    """(pid, start ticks) of every process of ours carrying ``home``'s marker whose
    backend no longer runs. Unreadable and vanishing processes are skipped. Raises
    nothing."""
    hid = home_id(home)
    if not hid:
        return []
    found = []
    for pid in procfs.proc_pids():
        m = _marker_of(pid)
        if m is None or m[0] != hid or procfs.running(m[1], m[2]) or not _ours(pid):
            continue
        ticks = procfs.start_ticks(int(pid))
        if ticks is not None:
            found.append((int(pid), ticks))
    return found


def sweep(home: str) -> list[int]:
    """SIGKILL the :func:`orphans` of ``home``, each by its pid once a pidfd for it is
    open and its start ticks are checked again (a pid reused meanwhile is never hit);
    the pids killed. Raises nothing."""
    return [pid for pid, ticks in orphans(home)
            if procfs.kill_verified(pid, ticks, signal.SIGKILL)]


async def _sweep_logged(home: str, after: float = 0.0) -> None:
    await asyncio.sleep(after)
    try:
        ended = await asyncio.to_thread(sweep, home)
    except Exception as exc:   # a sweep that fails leaves what it missed: never fatal
        log.warning("exec probes: the sweep for probes of dead backends failed: %s: %s",
                    type(exc).__name__, exc)
        return
    log.info("exec probes: ended %d process(es) left by probes of a dead backend%s",
             len(ended), f" (pids {' '.join(map(str, ended[:10]))})" if ended else "")


SWEEP_AFTER_S = 5.0
"""How long after a generation's start its sweep runs: past a handoff's pause and upgrade
call, which reading every process's environment beside them lengthened (handoff pause
p50 ~30 -> ~36-45 ms with 200 apps); a dead backend's probe runs that much longer."""


def end_orphaned_probes(home: str, backend: Identity, after: float = 0.0
                        ) -> asyncio.Task[None]:
    """Mark this backend's probes (:func:`mark`) and sweep, once, in the background,
    what probes of this home's dead backends left running (logged with how many it
    ended; a failure is logged, never raised), ``after`` s from now (a generation:
    SWEEP_AFTER_S). Called by a generation once it holds its grant, before it runs any
    probe: the marking is at once."""
    mark(home, backend)
    task = asyncio.create_task(_sweep_logged(home, after), name="probe sweep")
    _sweeping.add(task)
    task.add_done_callback(_sweeping.discard)
    return task
