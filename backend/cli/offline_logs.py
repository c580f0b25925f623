"""``tenure logs`` while tenure is not running: the owner's journal read from disk.

After ``tenure down``, or when the owner and the guardian died, no backend answers, but
execution/journal.db still holds what the apps wrote until then; that is when an
operator most needs it. When a read finds neither daemon running
(everyday.stopped), this reads the file itself, read-only, with the owner's own page
reader (owner.journalread), and says so on stderr. Targets are matched against the
apps the journal has lines of, by the backend's rules (backend.targets), but an
instance by its number only (no glob). ``-f`` prints what there is and ends: nothing
is written while tenure is down. A follower whose tenure is stopped (``tenure down``)
reads the rest from the file the same way, from where it was, and ends.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from protocol.errors import (
    BackendUnavailable,
    BadRequest,
    Conflict,
    NotFound,
    OwnerUnavailable,
    Unauthorized,
)
from protocol.layout import Layout

TYPE_CHECKING = False
if TYPE_CHECKING:   # typing and sqlite3 cost every `tenure logs` a few ms to import
    import sqlite3
    from typing import Any

__all__ = ["Fallback", "FollowEnded"]

STOPPING_S = 5.0   # how long a follower waits for the daemons of a `tenure down` to end
def _blocked(exc: BackendUnavailable) -> bool:
    """The guardian's diagnostics say its recovery of a backend is blocked."""
    from .render import blocked
    return blocked(exc.data.get("diagnostics")) is not None


class FollowEnded(Exception):
    """Raised to a follow once the file was read to its end: nothing more will come."""


class Fallback:
    """A ``call`` for logs.follow_logs (and ``tenure job logs``): the backend's ``logs``,
    or, once a call found tenure not running (a follower: stopping), the journal file
    from where it was. ``command`` and ``whose`` word the note on stderr."""

    def __init__(self, call: Callable[..., Any], lay: Layout, command: str = "logs",
                 whose: str = "the apps") -> None:
        self._call, self._lay = call, lay
        self._command, self._whose = command, whose
        self._conn: sqlite3.Connection | None = None
        self._marks: tuple[sqlite3.Connection, Any] | None = None   # loaded once a file
        self._first = True
        self._read_to_end = False
        self._told_gone = False

    def __call__(self, args: Any, method: str, params: dict[str, Any]) -> Any:
        if self._conn is None:
            first, self._first = self._first, False
            try:
                return self._call(args, method, params)
            except BackendUnavailable as exc:
                down = exc.data.get("stopped")
                if down is None and args.follow and not _blocked(exc):
                    down = self._stopping()   # `tenure down` while following: its
                    # daemons may still be ending (a blocked recovery is not that)
                if down is None:
                    raise
                self._read_file(args, "tenure is not running" if first else "tenure stopped")
            except OwnerUnavailable as exc:
                if not self._owner_gone():
                    raise   # silent (stopped, busy), or not ours to tell: as it was
                return self._owner_gone_page(args, params, exc)
        if self._read_to_end:   # only a follow asks again: nothing is written now
            raise FollowEnded
        page = self._read(params)
        self._read_to_end = not page["more"]
        return page

    def _read_file(self, args: Any, why: str) -> None:
        """From now on read the journal file (``why``: tenure is not running, or
        stopped), and say so on stderr."""
        self._conn = self._open(why)
        self._say(why, "; -f ends there" if args.follow else "")

    def _say(self, why: str, tail: str = "") -> None:
        sys.stderr.write(f"tenure: {self._command}: {why}: reading {self._path} directly "
                         f"(what {self._whose} wrote until the owner stopped){tail}\n")
        sys.stderr.flush()

    def _owner_gone(self) -> bool:
        """Nothing accepts on the owner's socket and nothing holds its lock: the owner
        died (a stopped or busy one still accepts; None, we may not tell, is not gone).
        Not while an owner maintenance window is open (`tenure owner upgrade`): the next
        owner is on its way, and a follower waits for it as for a silent one."""
        from .everyday import runs, unfinished_window
        return runs(self._lay.owner_sock, "owner") is False and \
            unfinished_window(self._lay) is None

    def _owner_gone_page(self, args: Any, params: dict[str, Any],
                         silent: OwnerUnavailable) -> Any:
        """A page of the file while a backend answers but its owner died: nobody writes
        the journal, so what the apps wrote until then is read from the file, and said
        (once). Without ``-f`` the file is read to its end from now on. A follower reads
        what the file has past where it was, then waits for an owner as for a silent
        one: ``silent`` is raised once the file has no more (logs.read_page), and the
        backend is asked first at every page, so a new owner's lines follow on."""
        why = "the owner is not running"
        if not args.follow:
            self._read_file(args, why)
            page = self._read(params)
            self._read_to_end = not page["more"]
            return page
        if not self._told_gone:
            self._told_gone = True
            self._say(why)
        self._conn = self._open(why)
        try:
            page = self._read(params)
        finally:
            self._conn.close()
            self._conn = None
        if not page["records"]:
            raise silent
        return page

    def job_source(self, args: Any, job_id: int) -> dict[str, Any]:
        """``tenure job logs`` once tenure was found not running (the backend, which
        knows the job's template, does not answer): reads the journal file from now on,
        says so, and returns the ``{stack, app, instance}`` that keeps job ``job_id``'s
        output there. The journal keys it by the job's id: app ``job:NAME``
        (backend.jobs.runner.journal_app), instance the id, unique in a ledger. Raises
        NotFound when the journal has no lines of that job, Conflict when several
        templates have lines of that id (the journal outlived a job ledger)."""
        self._first = False
        self._read_file(args, "tenure is not running")
        apps = self._apps()
        found = [(stack, app) for stack, app in apps if app.startswith("job:") and
                 self._page({"stack": stack, "app": app, "instance": job_id, "tail": 1,
                             "limit": 1})["records"]]
        if not found:
            raise NotFound(f"the journal has no lines of job {job_id}: no such job, it wrote "
                           "nothing, or its lines were pruned (with tenure down its ledger "
                           "is not asked; `tenure up`, then `tenure job show "
                           f"{job_id}`)", {"id": job_id, "path": self._path})
        if len(found) > 1:
            names = ", ".join(f"{stack}/{app}/{job_id}" for stack, app in found)
            raise Conflict(f"the journal has lines of job {job_id} under several templates "
                           f"({names}): it outlived a job ledger; read one with `tenure "
                           "logs STACK/job:NAME/ID`",
                           {"id": job_id, "sources": [f"{s}/{a}" for s, a in found]})
        (stack, app), = found
        return {"stack": stack, "app": app, "instance": job_id}

    def _stopping(self) -> dict[str, Any] | None:
        """everyday.stopped once the daemons that stopped answering have ended (a
        shutdown takes a moment); None when they still run after STOPPING_S."""
        import time

        from .everyday import stopped
        deadline = time.monotonic() + STOPPING_S
        while (down := stopped(self._lay)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        return down

    @property
    def _path(self) -> str:
        return self._lay.journal

    def _open(self, why: str) -> sqlite3.Connection:
        """The journal file, read only. Raises UnsafePath (refuse_linked_db), NotFound,
        Unauthorized, StateCorrupt."""
        import os
        import sqlite3

        from protocol.durable import refuse_linked_db
        refuse_linked_db(self._path)
        if not os.path.exists(self._path):
            raise NotFound(f"{why} and there is no journal at {self._path}:"
                           " no app has run on this home", {"path": self._path})
        if not os.access(self._path, os.R_OK):   # a viewer of a system-scope home
            uid = os.stat(self._path).st_uid
            raise Unauthorized(f"{why}, and its journal {self._path} is "
                               f"readable only by uid {uid}: run `tenure logs` as that user",
                               {"path": self._path, "uid": uid})
        from owner.journal import check_schema
        from owner.journaldb import damaged
        # without a write-ahead log (an owner that closed it cleanly) the file is all
        # there is: read as it is, so the read makes no -shm or -wal beside it; with one
        # (an owner that died), SQLite reads it too, and needs its -shm for that
        whole = "" if os.path.exists(f"{self._path}-wal") else "&immutable=1"
        try:
            conn = sqlite3.connect(f"file:{self._path}?mode=ro{whole}", uri=True,
                                   isolation_level=None)
            if check_schema(conn, self._path):
                raise sqlite3.DatabaseError("it holds no journal")
        except sqlite3.Error as exc:
            raise damaged(self._path, str(exc)) from None
        return conn

    def _read(self, params: dict[str, Any]) -> Any:
        """What the backend's ``logs`` answers, from the file: one page, merged across
        the targets' sources (backend.logsel)."""
        import asyncio

        from backend.logsel import after_time, read_sources
        from backend.targets import source_target
        p = {k: v for k, v in params.items() if v is not None}
        targets, since_time = p.pop("targets", None), p.pop("since_time", None)
        resolved = p.pop("resolved", False)

        async def read(q: dict[str, Any]) -> dict[str, Any]:
            return self._page(q)

        async def answer() -> Any:
            if since_time is not None:
                p["after"] = max(p.get("after", 0), await after_time(read, since_time))
            if not targets:
                return await read(p)
            chosen = self._sources(targets, resolved)
            page = await read_sources(read, chosen, p)
            # as the backend answers: a follower reads these sources from then on, the
            # globs not resolved again once tenure answers (backend.api_logs)
            return {**page, "resolved": [source_target(s) for s in chosen]}
        return asyncio.run(answer())

    def _page(self, q: dict[str, Any]) -> dict[str, Any]:
        """What the owner's ``logs.read`` answers, read from the file."""
        from backend.logsel import PAGE_BYTES, PAGE_RECORDS
        from owner.journal import READ_LIMIT_MAX
        from owner.journalpruned import Pruned
        from owner.journalread import Filters, read_at, refuse_damage
        assert self._conn is not None
        flt = Filters(q.get("stack"), q.get("app"), q.get("instance"), q.get("stream"))
        flt.sql()
        if self._marks is None or self._marks[0] is not self._conn:
            marks = Pruned()                       # what retention deleted, as stored
            with refuse_damage(self._path):
                marks.load(self._conn)
            self._marks = (self._conn, marks)
        pruned = self._marks[1]
        return read_at(self._conn, q.get("after", 0), min(q.get("limit", PAGE_RECORDS),
                       READ_LIMIT_MAX), q.get("max_bytes", PAGE_BYTES), flt,
                       q.get("tail"), pruned, path=self._path).to_wire()

    def _apps(self) -> list[tuple[str, str]]:
        """Every (stack, app) the journal file has lines of. Raises StateCorrupt for a
        damaged file (a name that is not UTF-8, say), as the owner would."""
        from owner.journalread import refuse_damage
        assert self._conn is not None
        with refuse_damage(self._path):
            return [(str(st), str(app)) for st, app in self._conn.execute(
                "SELECT DISTINCT stack, app FROM extents")]

    def _sources(self, targets: list[str], resolved: bool = False,
                 ) -> list[tuple[str, str | None, int | None]]:
        """The sources ``targets`` name among the apps the journal has lines of, by the
        rules of the backend's (backend.targets: the same words for a malformed target,
        BadRequest; NotFound for one that names nothing), but an instance by its number
        only. ``resolved``: targets a first read resolved (the answer's ``resolved``),
        each exactly one source."""
        from backend.logsel import bounded
        from backend.targets import check_cli_targets, exact_source
        if resolved:
            return [exact_source(t) for t in targets]
        check_cli_targets(targets)
        apps = self._apps()
        keys = [f"{stack}/{app}/0" for stack, app in apps]   # to match stacks and apps
        found: list[tuple[str, str | None, int | None]] = []
        missing = []
        for t in targets:
            named = self._named(keys, t)
            if not named:
                missing.append(t)
            found += named
        if missing:
            raise NotFound(f"the journal has no lines of {', '.join(map(repr, missing))}",
                           {"targets": missing})
        return bounded(found)

    def _named(self, keys: list[str], target: str,
               ) -> list[tuple[str, str | None, int | None]]:
        """The sources one well-formed ``target`` names: its stack and app parts matched
        against ``keys`` (backend.targets.sources), its instance number kept where the
        journal has lines of that instance. Raises BadRequest for a glob in the
        instance part (the journal alone does not list instances)."""
        from backend.targets import is_glob, sources
        parts = target.split("/")
        if len(parts) < 3 or parts[2] == "*":   # `STACK/APP/*` is the app, as online
            return sources(keys, target)
        if is_glob(parts[2]):
            raise BadRequest(f"{target!r}: while tenure is not running, name instances by "
                             "number (the journal alone does not list them)",
                             {"target": target})
        n = int(parts[2])
        return [(stack, app, n) for stack, app, _ in sources(keys, "/".join(parts[:2]))
                if app is not None and self._page({"stack": stack, "app": app,
                                                   "instance": n, "tail": 1,
                                                   "limit": 1})["records"]]
