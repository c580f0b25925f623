"""What a dead owner left running: every live process of its launches, and why it counts.

Read after an owner crash, by ``reconcile`` (to prove launches gone) and by the guided
reconcile (to seal and drain them). The suspects are the launches owner.db records as
live (``starting`` or ``running``), and the launches that ended but may have left
something behind: those with recorded descendants (a leader that exited before its
setsid child; a child of such a descendant carries the launch key in its environment)
and those whose recorded cgroup is still there. Each
source below is independent; a process counts if any finds it, with the first
reason that found it:

- ``leader``: the recorded pid, with the same start ticks;
- ``process group``: a member of the recorded group (live rows only: once the leader's
  exit was recorded its number is no longer pinned and may name a stranger's group);
- ``tracked descendant``: a descendant the owner recorded, same pid and start ticks;
- ``launch key in environment``: ``TENURE_LAUNCH_KEY`` (finds children that left the
  group, and processes started just before the owner died);
- ``cgroup member``: ``cgroup.procs`` of the launch's own cgroup, the one recorded at
  launch, else the one a process found above is in.

Reads /proc and cgroupfs only; nothing here writes or signals.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from protocol.layout import HOME_ID_ENV, home_id
from protocol.procfs import environ, environ_matches, group_members, read_stat, running

from .cgroups import MOUNT, cgroup_name, members, read_proc_cgroup
from .descendants import LAUNCH_KEY_ENV, OWNER_HOME_ENV
from .store import LaunchRow, LaunchState, OwnerStore, Tracked

__all__ = ["HOME_IN_ENVIRONMENT", "REASONS", "Found", "Suspects", "cgroup_of",
           "ended_cgroups", "find", "inside_app", "lingering", "printable",
           "recorded_cgroup", "strays", "suspects", "unrecorded"]

REASONS = ("leader", "process group", "tracked descendant", "launch key in environment",
           "cgroup member")
"""Why a process counts, strongest source first (the order :func:`find` asks them)."""

HOME_IN_ENVIRONMENT = "this home in its environment"
"""Why a process that no recorded launch accounts for counts (:func:`unrecorded`)."""

_MOUNTS = (str(MOUNT), str(MOUNT / "unified"))
"""Where a unified (cgroup v2) hierarchy is mounted: pure v2 hosts, then hybrid ones."""

LIVE = (LaunchState.STARTING, LaunchState.RUNNING)


@dataclass(frozen=True)
class Suspects:
    """The dead owner's launches that may have processes, as owner.db records them."""

    rows: list[LaunchRow]            # live rows first, then exited ones with descendants
    tracked: list[Tracked]           # recorded descendants of this boot
    cgroups: dict[str, str]          # launch key -> cgroup recorded at launch
    home: str = ""                   # OWNER_HOME_ENV of this home's launches
    home_id: str = ""                # and their HOME_ID_ENV ("": not known)


@dataclass(frozen=True)
class Found:
    row: LaunchRow
    pids: dict[int, str]             # pid -> why it counts (first source that found it)
    cgroup: str | None


@dataclass(frozen=True)
class Recorded:
    """What owner.db records of a dead owner's launches (see :func:`recorded`)."""

    suspects: Suspects
    live_this_boot: int
    outlived: list[int]


def recorded(db: str, boot_id: str, home: str) -> Recorded:
    """The suspects, the launches recorded live on this boot and the processes that
    outlived what owner.db records (:func:`lingering`), read without creating owner.db:
    a missing one records nothing, and a reconcile goes by the environment alone."""
    if not os.path.lexists(db):
        return Recorded(Suspects([], [], {}, home, home_id(home)), 0, [])
    store = OwnerStore(db)
    try:
        return Recorded(suspects(store, boot_id, home), store.live_launches_of_boot(boot_id),
                        lingering(store, boot_id))
    finally:
        store.close()


def suspects(store: OwnerStore, boot_id: str, home: str) -> Suspects:
    """The launches to look at: recorded live, with recorded descendants, or ended with
    their cgroup still there (the owner removes it once empty; one that outlived the
    owner may hold what outlived the leader). Raises nothing beyond what the store
    raises."""
    rows = store.live_launches()
    tracked = store.descendants(boot_id)
    left = list(ended_cgroups(store, boot_id))
    seen = {r.launch_key for r in rows}
    for key in dict.fromkeys([*(t.launch_key for t in tracked), *left]):
        row = None if key in seen else store.get_launch(key)
        if row is not None:
            rows.append(row)
    return Suspects(rows, tracked, store.cgroups([r.launch_key for r in rows]), home,
                    home_id(home))


def lingering(store: OwnerStore, boot_id: str) -> list[int]:
    """Processes of this boot that outlived what owner.db records as live: recorded
    descendants that still run as the process recorded (same pid and start ticks), and
    members of the recorded cgroups of launches that ended."""
    pids = {t.pid for t in store.descendants(boot_id) if running(t.pid, t.start_ticks)}
    for cg in ended_cgroups(store, boot_id).values():
        pids.update(members(Path(cg)))
    return sorted(pids)


def ended_cgroups(store: OwnerStore, boot_id: str) -> dict[str, str]:
    """Launch key -> cgroup of the launches of this boot that ended while their
    recorded cgroup is still there (it may hold what outlived the leader)."""
    out = {}
    for key, path in store.ended_cgroups(boot_id).items():
        cg = recorded_cgroup(key, path)
        if cg is not None:
            out[key] = cg
    return out


def environ_scan(s: Suspects) -> dict[bytes, list[int]]:
    """One scan of every process's environment for this home and the suspects' launch
    keys: what :func:`find` and :func:`unrecorded` both read."""
    return environ_matches({_home_needle(s.home), *(_needle(r.launch_key) for r in s.rows)})


def find(s: Suspects, scan: dict[bytes, list[int]] | None = None) -> dict[str, Found]:
    """Per launch key (in the order of ``s.rows``): every live process of it. A process
    counts by its environment only when it names both the launch key and this home
    (``scan``: :func:`environ_scan` of ``s``, made here when not given)."""
    if not s.rows:
        return {}
    carriers = dict(environ_scan(s) if scan is None else scan)
    ours = set(_of_home(s, carriers.pop(_home_needle(s.home), [])))
    carriers = {n: [p for p in pids if p in ours] for n, pids in carriers.items()}
    out: dict[str, Found] = {}
    for r in s.rows:
        pids: dict[int, str] = {}
        if r.pid is not None and r.start_ticks is not None and running(r.pid, r.start_ticks):
            pids[r.pid] = "leader"
        if r.pgid is not None and r.state in LIVE:
            for pid in group_members(r.pgid):
                pids.setdefault(pid, "process group")
        for t in s.tracked:
            if t.launch_key == r.launch_key and running(t.pid, t.start_ticks):
                pids.setdefault(t.pid, "tracked descendant")
        for pid in carriers.get(_needle(r.launch_key), []):
            pids.setdefault(pid, "launch key in environment")
        cg = recorded_cgroup(r.launch_key, s.cgroups.get(r.launch_key)) or \
            cgroup_of(r.launch_key, list(pids))
        for pid in [] if cg is None else members(Path(cg)):
            pids.setdefault(pid, "cgroup member")
        out[r.launch_key] = Found(r, pids, cg)
    return out


def unrecorded(s: Suspects, found: dict[str, Found], scan: dict[bytes, list[int]]
               ) -> dict[str, list[int]]:
    """Processes carrying this home (``OWNER_HOME_ENV``; another container's aside:
    :func:`_of_home`) in their environment (``scan``: :func:`environ_scan`) that no
    recorded launch accounts for, by the launch key they carry (``?`` when none, and
    what cannot be printed as ``?``): what an owner.db that lost its records (deleted,
    emptied, set aside) no longer lists. Only processes we may read are seen."""
    known = {pid for f in found.values() for pid in f.pids}
    out: dict[str, list[int]] = {}
    for pid in _of_home(s, scan.get(_home_needle(s.home), [])):
        if pid in known:
            continue
        key = printable(_env_value(pid, LAUNCH_KEY_ENV) or "?")
        out.setdefault(key, []).append(pid)
    return out


def strays(home: str) -> list[int]:
    """Processes that carry this home in their environment, when owner.db has no record
    to hold them against (a start with no receipt: both may have been set aside)."""
    s = Suspects([], [], {}, home, home_id(home))
    return sorted(p for pids in unrecorded(s, {}, environ_scan(s)).values() for p in pids)


def _of_home(s: Suspects, pids: list[int]) -> list[int]:
    """Those of ``pids`` (carrying this home's path) that are this home's: all but those
    carrying another home id in another PID namespace, another container's tenure at
    the same path. Another id in this namespace still counts: this home's directory may
    have been made again (deleted while tenure ran) under its running apps."""
    if not s.home_id:
        return pids
    return [p for p in pids
            if _env_value(p, HOME_ID_ENV) in (None, s.home_id) or _our_pid_namespace(p)]


def _our_pid_namespace(pid: int) -> bool:
    """Whether ``pid`` is in this process's PID namespace (True when that cannot be
    read: then it counts, as any process carrying this home's path)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") == os.readlink("/proc/self/ns/pid")
    except OSError:
        return True


def _env_value(pid: int, name: str) -> str | None:
    prefix = f"{name}=".encode()
    return next((v[len(prefix):].decode(errors="replace") for v in environ(pid) or ()
                 if v.startswith(prefix)), None)


def printable(text: str) -> str:
    """``text`` with what a terminal would act on shown as ``?`` (it is printed for the
    operator's review), at most 200 characters."""
    return "".join(c if c.isprintable() else "?" for c in text[:200])


def inside_app(home: str) -> int | None:
    """This process, or the nearest of its ancestors, when it carries this home in its
    environment: a command run inside one of this home's apps (a job's shell), which a
    reconcile could neither leave out (it is the app's) nor stop (it is the command)."""
    s = Suspects([], [], {}, home, home_id(home))
    needle, pid, seen = _home_needle(home), os.getpid(), set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        if needle in (environ(pid) or ()) and _of_home(s, [pid]):
            return pid
        st = read_stat(pid)
        if st is None:
            return None
        pid = st.ppid
    return None


def _needle(key: str) -> bytes:
    return f"{LAUNCH_KEY_ENV}={key}".encode()


def _home_needle(home: str) -> bytes:
    return f"{OWNER_HOME_ENV}={home}".encode()


def recorded_cgroup(launch_key: str, path: str | None) -> str | None:
    """The cgroup recorded at launch, if it is one (under a cgroup mount, named after
    the launch, still a cgroup directory): a missing or foreign path counts for nothing,
    and so does one that climbs out of its mount (``..``).
    """
    if path is None or Path(path).name != cgroup_name(launch_key) or \
            os.path.normpath(path) != path:
        return None
    if not any(path.startswith(m + "/") for m in _MOUNTS):
        return None
    return path if (Path(path) / "cgroup.procs").exists() else None


def cgroup_of(launch_key: str, pids: list[int]) -> str | None:
    """The launch's own cgroup, found through one of its processes (an owner.db of an
    owner that recorded no cgroups, or a launch owner.db does not record)."""
    name = cgroup_name(launch_key)
    for pid in pids:
        rel = read_proc_cgroup(pid)
        if rel is None or not rel.rstrip().endswith("/" + name):
            continue
        for mount in _MOUNTS:
            found = recorded_cgroup(launch_key, mount + rel.strip())
            if found is not None:
                return found
    return None
