"""The one reader of /proc: process stat, start ticks, groups, children, environment,
mapped files.

A pid alone is not an identity: pids are reused. (pid, start_ticks) is, within one boot.
Every reader here returns None (or an empty result) for a process that is gone or that
/proc describes in a way we cannot parse; none of them raises. The ``*_strict`` readers
are the exception, for figures whose absence must not read as zero (owner.metrics): they
return None only for a process that is gone and raise for anything else.

Files are read with ``os.open``/``os.read`` instead of ``open()``: a group scan reads every
/proc/*/stat every 20 ms during a stop, and the text-file machinery made it ~3x slower.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Iterable, Iterator

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the command line a few ms to import
    from typing import Final

__all__ = [
    "PROC",
    "READ_MAX",
    "ProcStat",
    "ProcUsage",
    "boottime_ns",
    "children",
    "cmdlines",
    "described",
    "environ",
    "environ_matches",
    "group_members",
    "kill_verified",
    "mapped_files",
    "parse_io",
    "parse_stat",
    "parse_usage",
    "proc_pids",
    "read_bounded",
    "read_cmdline",
    "read_io",
    "read_io_strict",
    "read_stat",
    "read_stat_strict",
    "read_usage",
    "read_usage_strict",
    "running",
    "signal_pending",
    "silence",
    "start_ticks",
    "status_groups",
    "status_uid",
    "ticks_between",
]

PROC: Final = "/proc"
READ_MAX: Final = 1 << 20  # environ can be large; stat and children are small
# What /proc answers for a process that is gone: no directory any more (ENOENT), or a
# task that exited between the open and the read (ESRCH).
_GONE: Final = frozenset({errno.ENOENT, errno.ESRCH})


class ProcStat:
    """The few /proc/PID/stat fields tenure needs."""

    __slots__ = ("pgid", "pid", "ppid", "sid", "start_ticks", "state")

    def __init__(self, pid: int, state: str, ppid: int, pgid: int, sid: int,
                 start_ticks: int) -> None:
        self.pid, self.state, self.ppid = pid, state, ppid
        self.pgid, self.sid, self.start_ticks = pgid, sid, start_ticks

    @property
    def zombie(self) -> bool:
        """Dead and waiting to be reaped: holds nothing but a table slot."""
        return self.state in ("Z", "X")

    @property
    def stopped(self) -> bool:
        """Stopped by a signal (SIGSTOP, Ctrl-Z) or by a debugger: it answers nothing
        until it is continued."""
        return self.state in ("T", "t")

    def __repr__(self) -> str:
        return (f"ProcStat(pid={self.pid}, state={self.state!r}, ppid={self.ppid}, "
                f"pgid={self.pgid}, sid={self.sid}, start_ticks={self.start_ticks})")


def parse_stat(pid: int, data: bytes) -> ProcStat:
    """Parse the bytes of /proc/PID/stat.

    comm (field 2) is free text in parentheses and may itself contain spaces and ')', so
    split after the LAST ')'. Raises ValueError or IndexError on a malformed line.
    """
    rest = data[data.rindex(b")") + 2:].split()
    # rest[0] is field 3 (state); field N is rest[N - 3]; starttime is field 22.
    return ProcStat(pid=pid, state=rest[0].decode("ascii", "replace"), ppid=int(rest[1]),
                    pgid=int(rest[2]), sid=int(rest[3]), start_ticks=int(rest[19]))


class ProcUsage:
    """CPU and memory of one process from /proc/PID/stat. ``cpu_*_ticks`` include the
    time of its children it has already reaped (``cutime``/``cstime``)."""

    __slots__ = ("cpu_system_ticks", "cpu_user_ticks", "rss_pages", "start_ticks", "zombie")

    def __init__(self, cpu_user_ticks: int, cpu_system_ticks: int, rss_pages: int,
                 start_ticks: int, zombie: bool) -> None:
        self.cpu_user_ticks, self.cpu_system_ticks = cpu_user_ticks, cpu_system_ticks
        self.rss_pages, self.start_ticks, self.zombie = rss_pages, start_ticks, zombie


def parse_usage(data: bytes) -> ProcUsage:
    """Parse the usage fields of /proc/PID/stat (see :func:`parse_stat` for comm).

    Raises ValueError or IndexError on a malformed line."""
    rest = data[data.rindex(b")") + 2:].split()
    # field N is rest[N - 3]: utime 14, stime 15, cutime 16, cstime 17, starttime 22, rss 24
    return ProcUsage(cpu_user_ticks=int(rest[11]) + int(rest[13]),
                     cpu_system_ticks=int(rest[12]) + int(rest[14]),
                     rss_pages=int(rest[21]), start_ticks=int(rest[19]),
                     zombie=rest[0] in (b"Z", b"X"))


def parse_io(data: bytes) -> tuple[int, int]:
    """(read_bytes, write_bytes) from /proc/PID/io: bytes that reached the block layer.

    Raises ValueError when either line is missing or not a number."""
    found: dict[bytes, int] = {}
    for line in data.split(b"\n"):
        key, _, value = line.partition(b":")
        if key in (b"read_bytes", b"write_bytes"):
            found[key] = int(value)
    if len(found) != 2:
        raise ValueError("/proc/PID/io lacks read_bytes or write_bytes")
    return found[b"read_bytes"], found[b"write_bytes"]


def read_bounded(path: str, limit: int = 4096) -> bytes | None:
    """The first ``limit`` bytes of ``path``, or None when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        size = 0
        while size < limit:
            chunk = os.read(fd, min(65536, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_stat(pid: int | str) -> ProcStat | None:
    """The stat of ``pid``, or None if it is gone (or /proc says nothing sensible)."""
    try:
        return read_stat_strict(pid)
    except (OSError, ValueError, IndexError):
        return None


def read_stat_strict(pid: int | str) -> ProcStat | None:
    """The stat of ``pid``; None only when it is gone. Raises OSError when /proc could
    not be read for another reason (the reader out of descriptors: EMFILE), ValueError
    or IndexError when it cannot be parsed: what decides that a process is gone must
    not take a failed read for its end."""
    data = _read_strict(f"{PROC}/{pid}/stat")
    return None if data is None else parse_stat(int(pid), data)


def silence(pid: int) -> str:
    """What /proc says of a daemon ``pid`` that did not answer, for an error message:
    stopped (with the command that continues it), in uninterruptible sleep, exited, or
    running all the same."""
    return described(pid, read_stat(pid))


def described(pid: int, st: ProcStat | None) -> str:
    """:func:`silence` of ``pid`` from its stat already read (None: it is gone)."""
    if st is None:
        return f"pid {pid} is gone"
    if st.stopped:
        return f"pid {pid} is stopped (SIGSTOP or a debugger); kill -CONT {pid} continues it"
    if st.state == "D":
        return f"pid {pid} is in uninterruptible sleep (state D), usually waiting for storage"
    if st.zombie:
        return f"pid {pid} has exited"
    return f"pid {pid} runs (state {st.state}) but did not answer"


def read_usage(pid: int) -> ProcUsage | None:
    """The :class:`ProcUsage` of ``pid``; None if gone, unreadable or unparsable."""
    try:
        return read_usage_strict(pid)
    except (OSError, ValueError, IndexError):
        return None


def _read_strict(path: str) -> bytes | None:
    """One read of a small /proc file (stat, io: the kernel fills it in one go); None
    when the process is gone. Raises OSError for any other failure (EMFILE, EACCES)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError as e:
        if e.errno in _GONE:
            return None
        raise


def read_usage_strict(pid: int) -> ProcUsage | None:
    """The :class:`ProcUsage` of ``pid``; None only when it is gone (it exited between
    being listed and being read). Raises OSError when /proc could not be read for any
    other reason (the reader out of descriptors: EMFILE; EACCES) and ValueError or
    IndexError when /proc/PID/stat cannot be parsed: a figure nobody could read is not
    a process that uses nothing."""
    data = _read_strict(f"{PROC}/{pid}/stat")
    return None if data is None else parse_usage(data)


def read_io(pid: int) -> tuple[int, int] | None:
    """(read_bytes, write_bytes) of ``pid``; None if gone, unreadable (another user's
    process, without privilege) or unparsable."""
    try:
        return read_io_strict(pid)
    except (OSError, ValueError):
        return None


def read_io_strict(pid: int) -> tuple[int, int] | None:
    """(read_bytes, write_bytes) of ``pid``; None only when it is gone. Raises OSError
    when /proc/PID/io could not be read for any other reason (EMFILE; EACCES: another
    user's or a non-dumpable process, without privilege) and ValueError when it cannot
    be parsed."""
    data = _read_strict(f"{PROC}/{pid}/io")
    return None if data is None else parse_io(data)


def start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None when it does not exist.

    Without /proc (macOS), psutil's create time stands in (scaled to centiseconds).
    """
    if not os.path.isdir(PROC + "/self"):
        return _psutil_ticks(pid)
    st = read_stat(pid)
    return None if st is None else st.start_ticks


def _tick_ns() -> int | None:
    """Nanoseconds per clock tick of /proc's start times, None when a tick is not a whole
    number of them (then only /proc can say)."""
    try:
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    return 10**9 // hz if hz > 0 and 10**9 % hz == 0 else None


_BOOTTIME: Final = getattr(time, "CLOCK_BOOTTIME", None)   # Linux only
_TICK_NS: Final = _tick_ns() if _BOOTTIME is not None else None


def boottime_ns() -> int:
    """CLOCK_BOOTTIME now: the clock the kernel stamps a new process with at fork (0
    where there is none: :func:`ticks_between` then never answers)."""
    return 0 if _BOOTTIME is None else time.clock_gettime_ns(_BOOTTIME)


def ticks_between(before_ns: int, after_ns: int) -> int | None:
    """The start ticks of a process forked between two :func:`boottime_ns` readings,
    without reading /proc, when both readings fall within one clock tick; None when they
    straddle a tick boundary (or no tick length is known): then ask :func:`start_ticks`.

    Exact, not an estimate: the kernel stamps a process at fork with CLOCK_BOOTTIME and
    /proc/PID/stat shows that stamp divided by the tick length, rounded down. A process
    forked between the two readings has a stamp between them, so within that tick. Worth
    it because /proc/PID/stat of a child still inside its exec can take ~1 ms to read."""
    if _TICK_NS is None or before_ns > after_ns:
        return None
    tick = before_ns // _TICK_NS
    return tick if after_ns // _TICK_NS == tick else None


def status_uid(pid: int) -> int | None:
    """The effective uid of ``pid`` (/proc/PID/status), or None."""
    data = read_bounded(f"{PROC}/{pid}/status", 8192)
    for line in (data or b"").splitlines():
        if line.startswith(b"Uid:"):
            fields = line.split()
            return int(fields[2]) if len(fields) > 2 else None
    return None


def signal_pending(pid: int, signum: int) -> bool:
    """Whether signal ``signum`` waits to be taken by ``pid`` (/proc/PID/status: ShdPnd,
    the process's, or SigPnd, its main thread's): sent to a stopped process, it is
    taken once the process is continued. False when /proc does not say."""
    data = read_bounded(f"{PROC}/{pid}/status", 8192)
    bit = 1 << (signum - 1)
    for line in (data or b"").splitlines():
        if line.startswith((b"ShdPnd:", b"SigPnd:")):
            try:
                if int(line.split()[1], 16) & bit:
                    return True
            except (IndexError, ValueError):
                continue
    return False


def running(pid: int, ticks: int) -> bool:
    """True while the process ``pid`` started at ``ticks`` exists and has not exited.

    A zombie has exited: waiting on it would last until its parent (often init, which
    may reap late) collects it, so callers waiting for an exit must not count it.
    """
    if not os.path.isdir(PROC + "/self"):
        return _psutil_running(pid, ticks)
    st = read_stat(pid)
    return st is not None and st.start_ticks == ticks and not st.zombie


def _psutil_running(pid: int, ticks: int) -> bool:
    import psutil
    try:
        proc = psutil.Process(pid)
        return (int(proc.create_time() * 100) == ticks
                and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _psutil_ticks(pid: int) -> int | None:
    import psutil
    try:
        return int(psutil.Process(pid).create_time() * 100)
    except psutil.Error:
        return None


def proc_pids() -> Iterator[str]:
    """The pids /proc lists now, as strings (none when it cannot be read)."""
    try:
        names = os.listdir(PROC)
    except OSError:
        return
    for name in names:
        if name.isdigit():
            yield name


def group_members(pgid: int, *, include_zombies: bool = False,
                  include_session: bool = False) -> list[int]:
    """Pids whose process group is ``pgid`` (or, with ``include_session``, whose session
    is ``pgid``), by one scan of /proc/*/stat.

    Zombies are dead and hold nothing but a table slot; they are left out unless asked
    for, so "the group is empty" means "nothing in it can still run".
    """
    members = []
    for name in proc_pids():
        data = read_bounded(f"{PROC}/{name}/stat")
        if data is None:
            continue
        # Only fields 3 (state), 5 (pgrp) and 6 (session) matter: split no further.
        rest = data[data.rfind(b")") + 2:].split(b" ", 5)
        if len(rest) < 5 or not rest[2].isdigit() or not rest[3].isdigit():
            continue
        if int(rest[2]) != pgid and not (include_session and int(rest[3]) == pgid):
            continue
        if rest[0] in (b"Z", b"X") and not include_zombies:
            continue
        members.append(int(name))
    return members


def children(pid: int) -> list[int]:
    """Direct children of ``pid``: the union of /proc/PID/task/*/children.

    Each thread lists the children it forked (and orphans re-parented to it), so every
    thread's list is read. A process that is gone has none.
    """
    try:
        tids = os.listdir(f"{PROC}/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        data = read_bounded(f"{PROC}/{pid}/task/{tid}/children", 1 << 16)
        if data:
            out += [int(w) for w in data.split() if w.isdigit()]
    return out


def main_thread_children(pid: int) -> list[int]:
    """The children listed by ``pid``'s main thread: those it forked, and every orphan
    re-parented to the process while it runs (the kernel hands an orphan to the first
    live thread of its reaper, the main one). One read instead of one per thread."""
    data = read_bounded(f"{PROC}/{pid}/task/{pid}/children", 1 << 16)
    return [int(w) for w in data.split() if w.isdigit()] if data else []


def read_cmdline(pid: int) -> list[str] | None:
    """The argument list of ``pid`` (None when it is gone or has none: a zombie)."""
    data = read_bounded(f"{PROC}/{pid}/cmdline", READ_MAX)
    if not data:
        return None
    return [a.decode(errors="replace") for a in data.rstrip(b"\0").split(b"\0")]


def cmdlines() -> Iterator[tuple[int, bytes]]:
    """Every process's command line as the kernel holds it (arguments ended by NUL
    bytes), of those we may read; one gone meanwhile, or with none (a zombie), is
    skipped."""
    for pid in proc_pids():
        data = read_bounded(f"{PROC}/{pid}/cmdline", READ_MAX)
        if data:
            yield int(pid), data


def environ_matches(needles: Iterable[bytes], pids: Iterable[int | str] | None = None,
                    ) -> dict[bytes, list[int]]:
    """Which processes carry one of ``needles`` (whole ``NAME=value`` entries) in their
    environment: ``{needle: [pid, ...]}``. Scans ``pids``, or every process. Only
    processes we may read (root, or the same uid) are seen."""
    wanted = set(needles)
    found: dict[bytes, list[int]] = {}
    if not wanted:
        return found
    for pid in (proc_pids() if pids is None else pids):
        for var in environ(pid) or ():
            if var in wanted:
                found.setdefault(var, []).append(int(pid))
    return found


def environ(pid: int | str) -> list[bytes] | None:
    """The ``NAME=value`` entries of ``pid``'s environment, as far as READ_MAX bytes of
    it go (an entry cut there is left out: its value is not the process's); None when it
    is gone or unreadable. Empty while an exec of it has switched to the new image and
    not yet set up its stack (or for a process started with no environment at all)."""
    data = read_bounded(f"{PROC}/{pid}/environ", READ_MAX)
    if data is None:
        return None
    entries = data.split(b"\0")
    if len(data) >= READ_MAX and not data.endswith(b"\0"):
        entries.pop()   # cut short by the read
    return [v for v in entries if v]


def mapped_files(pid: int | str = "self") -> list[str] | None:
    """The paths of the files ``pid`` has mapped, in the order of /proc/PID/maps (a file
    mapped in several pieces appears several times; one replaced on disk since reads
    ``PATH (deleted)``); None when it is gone or unreadable."""
    data = read_bounded(f"{PROC}/{pid}/maps", 1 << 24)
    if data is None:
        return None
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            out.append(fields[5])
    return out


def status_groups(pid: int) -> list[int] | None:
    """The supplementary groups of ``pid`` (the ``Groups:`` line of /proc/PID/status);
    None if it is gone or unreadable."""
    data = read_bounded(f"{PROC}/{pid}/status", 1 << 16)
    if data is None:
        return None
    for line in data.split(b"\n"):
        if line.startswith(b"Groups:"):
            return [int(g) for g in line.split()[1:] if g.isdigit()]
    return None


def _open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``; None when it is gone; -1 when no pidfd can be had (an old
    kernel, or no fd left), and the caller falls back to check-then-kill."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except (AttributeError, OSError):
        return -1


def kill_verified(pid: int, ticks: int, sig: int, *, skip_pgid: int | None = None) -> bool:
    """Send ``sig`` to ``pid`` only if it is still the process that started at ``ticks``
    (and is not in group ``skip_pgid``, which the caller signals as a whole).

    Returns True if the signal was sent. Raises nothing.
    """
    fd = _open_pidfd(pid)
    if fd is None:
        return False
    try:
        st = read_stat(pid)
        # Checked after the open: if the process that holds the number now is ours, the
        # pidfd names it or an earlier, dead one; it can never name a stranger.
        if st is None or st.start_ticks != ticks or st.zombie or st.pgid == skip_pgid:
            return False
        if fd >= 0:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except OSError:
        return False
    finally:
        if fd >= 0:
            os.close(fd)
