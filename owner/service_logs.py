"""The owner's log and journal methods (logs.*): pages of the journal read, and its
lines forgotten and budgets set, each in the journal's own threads. A part of
owner.service.OwnerService (it mixes this in), apart for size."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from protocol.errors import BadRequest, Conflict
from protocol.server import Call

from .journal import Journal, LogSource
from .notes import write_note
from .store import LaunchRow
from .supervise import Launcher

__all__ = ["JOURNAL_THREADS", "JournalMethods", "on_journal_thread", "on_maintenance_thread"]

JOURNAL_THREADS = 2
"""Threads that read the journal for requests, for every connection together: their own,
not asyncio's shared default pool, where 150 pipelined logs.read of one client (each
waiting for the journal's one reader) held every thread and the owner's other work off
the loop waited seconds behind them. The rest wait their turn in this pool."""
_journal_pool = ThreadPoolExecutor(JOURNAL_THREADS, thread_name_prefix="journal-rpc")
_maintenance_pool = ThreadPoolExecutor(1, thread_name_prefix="journal-maint")
"""The one thread of the journal's maintenance requests (logs.retention, logs.forget,
logs.forget_apps), which take the writer for as long as their deletes run: in the
request threads, two of them held both, and every logs.read waited until they ended."""
_T = TypeVar("_T")


async def on_journal_thread(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)`` in the journal's own threads."""
    return await _in(_journal_pool, functools.partial(fn, *args, **kwargs))


async def on_maintenance_thread(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)`` in the journal's maintenance thread, one after another."""
    return await _in(_maintenance_pool, functools.partial(fn, *args, **kwargs))


async def _in(pool: ThreadPoolExecutor, call: Callable[[], _T]) -> _T:
    return await asyncio.get_running_loop().run_in_executor(pool, call)


class JournalMethods:
    """What owner.service.OwnerService gives these methods."""

    journal: Journal
    launcher: Launcher
    _require_epoch: Callable[[Call], None]

    async def logs_read(self, call: Call) -> Any:
        """One page: at most ``limit`` records and ``max_bytes`` of answer; ``next`` is
        the ``after`` of the next page and ``more`` says whether one may follow now."""
        p = call.params
        if p["stream"] not in (None, "stdout", "stderr"):
            raise BadRequest("params.stream must be stdout or stderr", {"field": "stream"})
        page = await on_journal_thread(
            self.journal.read_page, p["after"], p["limit"], max_bytes=p["max_bytes"],
            tail=p["tail"], stack=p["stack"], app=p["app"], instance=p["instance"],
            stream=p["stream"])
        return page.to_wire()

    async def logs_dropped(self, call: Call) -> Any:
        """Lines dropped per app since the owner started (the journal queue was full)."""
        dropped = self.journal.dropped_by_app()
        return {"apps": [{"stack": st, "app": app, "dropped": n}
                         for (st, app), n in sorted(dropped.items())],
                "total": self.journal.overflow_total}

    async def logs_forget(self, call: Call) -> Any:
        """Delete every journal line of each named ``{stack, app, instance}`` (all its
        generations), app after app in bounded steps (owner.journal.Journal.forget);
        idempotent, so a retry after a failure part-way goes on. Raises Conflict,
        deleting nothing, when a source still has a process (its lines are still being
        written)."""
        self._require_epoch(call)
        sources = sorted({(s["stack"], s["app"], s["instance"])
                          for s in call.params["sources"]})
        named = set(sources)
        self._refuse_busy("of these sources still have a process",
                          lambda r: (r.stack, r.app, r.instance) in named)
        deleted = await on_maintenance_thread(self.journal.forget, sources)
        return {"sources": len(sources), "deleted": deleted}

    async def logs_apps(self, call: Call) -> Any:
        """Each app with lines in the journal, its bytes and the time of its newest line
        (the backend forgets those of apps its config no longer has: logs.forget_apps),
        in (stack, app) order after ``after_stack``/``after_app``, at most ``limit``;
        ``more`` says whether a page follows."""
        p = call.params
        if (p["after_stack"] is None) != (p["after_app"] is None):
            raise BadRequest("params.after_stack and params.after_app go together",
                             {"field": "after_app"})
        after = None if p["after_stack"] is None else (p["after_stack"], p["after_app"])
        kept = await on_journal_thread(self.journal.apps, after, p["limit"] + 1)
        return {"apps": [{"stack": st, "app": app, "bytes": n, "last_at": at}
                         for st, app, n, at in kept[:p["limit"]]],
                "more": len(kept) > p["limit"]}

    async def logs_forget_apps(self, call: Call) -> Any:
        """Delete every journal line of each named ``{stack, app}`` (all its instances
        and generations), app after app in bounded steps; idempotent. Raises Conflict,
        deleting nothing, while one of them still has a process."""
        self._require_epoch(call)
        apps = sorted({(a["stack"], a["app"]) for a in call.params["apps"]})
        named = set(apps)
        self._refuse_busy("processes of these apps still run",
                          lambda r: (r.stack, r.app) in named)
        deleted = await on_maintenance_thread(self.journal.forget_apps, apps)
        return {"apps": len(apps), "deleted": deleted}

    def _refuse_busy(self, what: str, matches: Callable[[LaunchRow], bool]) -> None:
        """Raises Conflict naming the live or uncertain launches that ``matches``: lines
        of theirs are still being written, so none may be forgotten."""
        rows = [*self.launcher.live.values(), *self.launcher.uncertain.values()]
        busy = sorted({r.launch_key for r in rows if matches(r)})
        if busy:
            raise Conflict(f"{len(busy)} {what}: {', '.join(busy[:5])}",
                           {"launch_keys": busy[:100]})

    async def logs_retention(self, call: Call) -> Any:
        """Give the named apps their own journal budget (the bytes of output kept, the
        oldest pruned; one named with the default has none of its own); an app not named
        has the default, or with ``keep`` keeps the budget stored for it while it has
        lines (one taken out of the config; owner.journal.Journal.set_retention). Stored
        durably; a smaller budget prunes at once. Idempotent. Answers the budgets now in
        force."""
        self._require_epoch(call)
        budgets = {(b["stack"], b["app"]): b["bytes"] for b in call.params["budgets"]}

        def apply() -> tuple[int, dict[tuple[str, str], int]]:
            self.journal.set_retention(budgets, call.params["keep"])
            return self.journal.retention()
        default, now = await on_maintenance_thread(apply)
        return {"default": default, "budgets": [{"stack": st, "app": app, "bytes": n}
                                                for (st, app), n in sorted(now.items())]}

    async def logs_note(self, call: Call) -> Any:
        """Write one tenure line (owner.notes) into an app's log stream: the backend's
        word on why it gave up on the app. ``written`` is false when the journal queue
        had no room (the line is counted as dropped, like any other)."""
        self._require_epoch(call)
        p = call.params
        source = LogSource(p["stack"], p["app"], p["instance"], p["generation"])
        return {"written": write_note(self.journal, source, p["text"])}
