"""The backend API's ``logs``: one page of the owner's journal for the targets given,
read from as few sources as name them (backend.logsel). A part of backend.api.Api (it
mixes this in), apart for size."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protocol.errors import (
    CapabilityMissing,
    ConnectFailed,
    NotFound,
    OutcomeUnknown,
    OwnerUnavailable,
    ShuttingDown,
)
from protocol.server import Call

from .logsel import after_time, bounded, read_sources
from .targets import (
    Source,
    exact_source,
    journal_target,
    known_near,
    source_target,
    sources,
)

if TYPE_CHECKING:
    from .generation import Generation
    from .supervisor import Supervisor

__all__ = ["VIEWER_READS", "LogsReading"]

VIEWER_READS = 2   # viewers' `logs` calls at once: the owner's other reads are admins'


class LogsReading:
    """What backend.api.Api gives these methods."""

    gen: Generation
    sup: Supervisor
    _owner: Callable[[], Any]
    _link: Callable[..., dict[str, Any]]
    _unavailable: Callable[[str, str, dict[str, Any]], OwnerUnavailable]
    _require_owner: Callable[[str], None]
    _viewer_reads: asyncio.Semaphore   # VIEWER_READS turns

    async def logs(self, call: Call) -> Any:
        """One page of the owner's journal (see the owner's ``logs.read``). Raises
        CapabilityMissing for ``tail`` or ``max_bytes`` when the owner predates pages:
        it would ignore them and answer something else than asked; OwnerUnavailable
        while the owner is silent (its journal is read through it) or when the read
        failed on the way to it (a read changes nothing, so its outcome is not unknown:
        `tenure logs -f` waits and asks again) or met an owner that is stopping (its
        journal closed, as an owner upgrade does before the next owner reopens it)."""
        self._require_owner("reading the logs")
        try:
            if getattr(call.conn, "role", "admin") != "viewer":
                return await self._read_logs(call)
            async with self._viewer_reads:   # viewers never crowd out admins
                return await self._read_logs(call)
        except (ConnectFailed, OutcomeUnknown) as exc:   # nothing changes by a read
            # e.g. the owner stopped during it: the connection's heartbeat gave up on it
            raise self._unavailable(f"did not answer ({exc.msg})", "reading the logs",
                                    self._link(failed=True)) from exc
        except ShuttingDown as exc:
            raise self._unavailable(f"is stopping ({exc.msg})", "reading the logs",
                                    self._link()) from exc

    async def _read_logs(self, call: Call) -> Any:
        p = {k: v for k, v in call.params.items() if v is not None}
        targets, resolved = p.pop("targets", None), p.pop("resolved", False)
        since_time = p.pop("since_time", None)
        owner = self._owner()
        if ("tail" in p or "max_bytes" in p) and \
                (await owner.connect()).capabilities.get("logPages") != 1:
            raise CapabilityMissing("the owner predates paged logs (logPages@1); it gets "
                                    "them when it is next restarted with this release",
                                    {"missing": {"logPages": 1}})
        def read(q: dict[str, Any]) -> Any:
            return owner.call("logs.read", q)
        if since_time is not None:
            p["after"] = max(p.get("after", 0), await after_time(read, since_time))
        if not targets:
            return await read(p)
        chosen = [exact_source(t) for t in targets] if resolved else \
            await self._log_sources(targets)
        page = await read_sources(read, chosen, p,   # an owner that takes max_bytes
                                  shared=self.sup.owner_capabilities.get("logPages") == 1)
        return {**page, "resolved": [source_target(s) for s in chosen]}

    async def _log_sources(self, targets: list[str]) -> list[Source]:
        """The journal sources ``targets`` name: instances known or configured, or, for a
        target without globs (or with a last part ``*`` alone: ``web/*`` is the stack),
        lines left in the journal by an app no longer configured.
        Raises NotFound naming the targets that name nothing. A reader that goes on
        (``tenure logs -f``) sends the answer's ``resolved`` back with ``resolved``
        true: those sources stay read when their apps are removed from the config."""
        keys = {*self.sup.instances, *self.sup.keys_of(self.gen.config)}
        found: list[Source] = []
        missing = []
        for t in targets:
            named = sources(keys, t)
            plain = journal_target(t)
            if not named and plain is not None and \
                    await self._journal_has(exact_source(plain)):
                named = [exact_source(plain)]
            if not named:
                missing.append(t)
            found += named
        if missing:
            names = ", ".join(repr(t) for t in missing)
            globs = [t for t in missing if journal_target(t) is None]
            why = (" (a glob matches the instances tenure knows; name an app removed "
                   "since without one: its lines stay in the journal)") if globs else \
                ", and the journal has no lines of it"
            near = known_near(keys, missing[0]) if len(missing) == 1 else ""
            raise NotFound(f"no stack, app or instance matches {names}{why}{near}",
                           {"targets": missing})
        return bounded(found)

    async def _journal_has(self, source: Source) -> bool:
        stack, app, instance = source
        flt = {k: v for k, v in (("stack", stack), ("app", app), ("instance", instance))
               if v is not None}
        page = await self._owner().call("logs.read", {**flt, "tail": 1, "limit": 1})
        return bool(page["records"])

    # -- plans and operations ---------------------------------------------------------
