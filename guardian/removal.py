"""Removing installed releases nothing needs any more (`tenure release remove` and
`tenure release prune`; docs/releases.md, "Disk space").

A release stays while anything may run it, each named with why:

- the selected release and the one before it (recovery and a rollback start them);
- the release the guardian runs, and those its record goes to or back to;
- those the owner's record names (when the owner may run the guardian's copies: an owner
  of another account runs only copies staged for it, and cannot read them);
- the release the recovery certificate was written by;
- the release of every backend generation the guardian holds (current, candidate,
  standby), and the releases of every activation that has not ended (an upgrade cut
  short by the guardian's death, which its next boot completes or undoes; one that
  ended ``uncertain`` or ``blocked`` has ended: recovery starts the selected release);
- any release a process of this machine was started from: its command line names the
  release's directory (a guardian, an owner, a backend started without a standby; a
  generation that began as a prewarmed standby names none, and is known by the above).

An unreadable record of these is refused (its code), not guessed past. A removal moves
the directory aside in one rename (a crash leaves an entry `tenure release list` shows
as `incomplete`, which the next prune removes), forgets the release in state.db and
deletes the tree.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.errors import Conflict, NotFound, StorageFailed
from protocol.procfs import cmdlines

from .manifest import is_release_id
from .release import ReleaseStatus, list_releases, summarize
from .treefiles import fsync_dir, remove_tree

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .coordinator import Coordinator

__all__ = ["DEFAULT_KEEP", "Removal", "needed", "plan_prune", "plan_remove", "remove"]

log = logging.getLogger("tenure.guardian")

DEFAULT_KEEP = 3
"""Releases `tenure release prune` keeps besides those still needed: the newest
installed."""

@dataclass(frozen=True)
class Removal:
    """One entry of releases/ to remove: a release, or what an interrupted install or
    removal left (``incomplete``)."""

    name: str
    status: str
    bytes: int

    def to_wire(self) -> dict[str, Any]:
        return {"release": self.name, "status": self.status, "bytes": self.bytes}


async def needed(co: Coordinator) -> dict[str, list[str]]:
    """Release id -> why it stays (see the module's docstring). Raises StateCorrupt or
    UnsafePath for a record that cannot be read."""
    why: dict[str, list[str]] = {}

    def add(rid: str | None, reason: str) -> None:
        if rid is not None and reason not in why.setdefault(rid, []):
            why[rid].append(reason)

    sel = co.state.selector()
    add(sel.current, "it is the selected release")
    add(sel.previous, "it is the previous release (a rollback starts it)")
    if co.own is not None:
        add(co.own.release, "the guardian runs it")
        add(co.own.record.release, "the guardian's record names it")
        add(co.own.record.previous, "the guardian goes back to it")
    for rid in co.generation_releases():
        add(rid, "a backend generation of the guardian runs it")
    for act in co.state.open_activations():
        add(act.release, f"activation {act.id} has not ended ({act.phase})")
        add(act.from_release, f"activation {act.id} has not ended ({act.phase}): it may "
            "go back to it")
    body = (await asyncio.to_thread(co.certificate)).get("body") or {}
    if isinstance(body, dict) and is_release_id(body.get("release")):
        add(body["release"], "the recovery certificate was written by it")
    for rid, reason in await asyncio.to_thread(_owner_record, co.paths.owner_release):
        add(rid, reason)
    for rid in await asyncio.to_thread(running_from, co.paths.releases):
        add(rid, "a process runs from it")
    return why


def _owner_record(path: str) -> list[tuple[str, str]]:
    """The releases the owner's record names. Unreadable for want of permission: the
    owner runs as another account, which runs only copies staged for it (owner.release,
    ``tree``), so none of the guardian's. Raises StateCorrupt, UnsafePath."""
    from owner.release import load
    try:
        rec = load(path, denied=True)
    except PermissionError:
        return []
    return [(rid, reason) for rid, reason in (
        (rec.release, "the owner's record names it"),
        (rec.previous, "the owner goes back to it")) if rid is not None]


def running_from(releases: Path) -> set[str]:
    """Ids of the releases under ``releases`` whose directory a process's command line
    names (python -c "...sys.path.insert(0, 'RELEASES/ID/lib')...")."""
    roots = {os.fspath(releases), os.path.realpath(releases)}
    pattern = re.compile(b"(?:" + b"|".join(re.escape(os.fsencode(r)) for r in roots)
                         + b")/([0-9a-f]{64})(?![0-9a-f])")
    return {m.group(1).decode() for _pid, line in cmdlines()
            for m in pattern.finditer(line)}


async def plan_remove(co: Coordinator, rid: str) -> Removal:
    """The removal of installed release ``rid``. Raises NotFound (not installed),
    Conflict (something still needs it: why, in ``data.why``), what :func:`needed`
    raises."""
    releases = co.paths.releases
    s = await asyncio.to_thread(summarize, releases, rid)
    if s.status is ReleaseStatus.MISSING:
        raise NotFound(f"release {rid} is not installed (see `tenure release list`)",
                       {"release": rid})
    why = (await needed(co)).get(rid)
    if why:
        raise Conflict(f"release {rid[:12]} stays: {'; '.join(why)}",
                       {"release": rid, "why": why})
    return Removal(rid, str(s.status), await asyncio.to_thread(tree_bytes, releases / rid))


async def plan_prune(co: Coordinator, keep: int
                     ) -> tuple[list[Removal], dict[str, list[str]]]:
    """What a prune keeping the ``keep`` newest installed releases removes, and what it
    keeps with why. The newest by installation order (state.db); an installed release
    state.db does not know counts as older than every one it knows. What an interrupted
    install or removal left goes too; an entry whose name is no release id is left as
    it is. Raises what :func:`needed` raises."""
    releases = co.paths.releases
    why = await needed(co)
    known = {rid: i for i, rid in enumerate(co.state.releases())}

    def work() -> tuple[list[Removal], dict[str, list[str]]]:
        entries = list_releases(releases)
        ids = [s.name for s in entries if is_release_id(s.name)]
        newest = sorted(ids, key=lambda n: (known.get(n, -1), n), reverse=True)[:keep]
        kept = {n: list(why.get(n, [])) for n in ids if n in why or n in newest}
        for n in newest:
            kept[n].append(f"one of the {keep} newest installed")
        gone = [Removal(s.name, str(s.status), tree_bytes(releases / s.name))
                for s in entries if s.name not in kept and (
                    is_release_id(s.name) or s.status is ReleaseStatus.INCOMPLETE)]
        return gone, kept
    return await asyncio.to_thread(work)


async def remove(co: Coordinator, removals: Iterable[Removal]) -> list[Removal]:
    """Remove each entry: a release is renamed aside in one step, forgotten in state.db
    and deleted; what an interrupted install or removal left is deleted. Returns those
    removed. Raises StorageFailed naming the entry where it stopped."""
    releases = co.paths.releases
    done: list[Removal] = []
    for r in removals:
        try:
            if r.status == str(ReleaseStatus.INCOMPLETE):
                await asyncio.to_thread(remove_tree, releases / r.name)
            else:
                aside = releases / f"{r.name}.tmp-{os.urandom(6).hex()}"
                await asyncio.to_thread(_move, releases / r.name, aside)
                co.state.forget_release(r.name)
                await asyncio.to_thread(remove_tree, aside)
        except FileNotFoundError:
            pass   # gone already
        except (OSError, sqlite3.Error) as exc:
            raise StorageFailed(
                f"removing {r.name} failed ({type(exc).__name__}: {exc}); what is left of "
                "it is listed as incomplete, and the next `tenure release prune` removes it",
                {"release": r.name, "removed": [d.name for d in done]}) from exc
        log.info("removed %s %s (%d bytes)", "release" if is_release_id(r.name)
                 else "what an interrupted install left,", r.name, r.bytes)
        done.append(r)
    return done


def _move(path: Path, aside: Path) -> None:
    os.rename(path, aside)
    fsync_dir(aside.parent)


def tree_bytes(root: Path) -> int:
    """The bytes of the files under ``root`` (symlinks not followed); 0 when it cannot
    be read."""
    total = 0
    try:
        if not os.path.isdir(root) or os.path.islink(root):
            return os.lstat(root).st_size
        for here, _dirs, files in os.walk(root):
            total += sum(os.lstat(os.path.join(here, f)).st_size for f in files)
    except OSError:
        pass
    return total

