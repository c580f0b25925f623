"""The backend API's reads of what runs: ``status`` and ``inspect``, with how current
our view of the owner is (the owner link) and the figures and held sockets they ask the
owner for. A part of backend.api.Api (it mixes this in), apart for size."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protocol.errors import TenureError
from protocol.procfs import described, read_stat
from protocol.server import Call

from . import instance as im
from .activation import CAPABILITY
from .enforce import identity_view
from .probes import checks_view
from .queuefile import state as queue_state
from .targets import in_order, select_all
from .usage import Usage, owner_metrics

if TYPE_CHECKING:
    from .generation import Generation
    from .jobs.runner import JobRunner
    from .supervisor import Supervisor

__all__ = ["OWNER_GONE_NEXT", "StatusReading"]

OWNER_GONE_NEXT = ("its apps may still run, unsupervised: `tenure owner reconcile "
                   "--prepare` lists them (docs/reconcile.md)")
"""What `status` says after the owner's pid is gone."""


class StatusReading:
    """What backend.api.Api gives these methods."""

    gen: Generation
    sup: Supervisor
    intents: dict[str, Any]
    jobs: JobRunner
    _procs: Usage
    _owner: Callable[[], Any]
    _targets: Callable[..., list[str]]

    async def status(self, call: Call) -> Any:
        dropped = self.gen.log_dropped
        link = self._link()
        wanted = call.params.get("targets")
        keys = in_order(self.sup.instances) if not wanted else \
            select_all(self.sup.instances, wanted)
        held, usage = await self._ask_owner(keys if wanted else None, link)
        link = self._link()    # as of the answer: the owner may have gone silent meanwhile
        t = time.monotonic()   # after the owner's answer: a launch may have ended meanwhile
        rows = [self._row(k, self.sup.instances[k], t, dropped, usage)
                for k in keys if k in self.sup.instances]   # an apply may remove some
        if not link["current"]:
            rows = [_unknown(r, link["age"]) for r in rows]
        self._procs.forget_except(self._live_idents())
        return {"backend": {"activation": self.gen.activation, "epoch": self.gen.epoch,
                            "release": self.gen.handoff.get("release"),
                            "pid": self.gen.identity.pid, "draining": self.gen.draining,
                            "config": self.gen.config.source,
                            "config_revision": self.gen.config.revision},
                "owner": self.gen.owner_identity.to_wire() if self.gen.owner_identity
                else None, "owner_link": link, "intents": self.intents, "apps": rows,
                "queued_config": queue_state(self.gen.layout.queued_config),
                "log_write_error": self.gen.log_write_error,
                "certificate_write_error": self.gen.certificate_error,
                "log_retention_unsupported": self.gen.log_budgets.unsupported,
                "jobs": self.jobs.summary(), "guardian": self._guardian_trouble(), **held}

    def _guardian_trouble(self) -> dict[str, Any] | None:
        """``{pid, gone, problem}`` when our guardian (the parent that started us) is
        stopped or gone: a crash of ours would then not be recovered, though everything
        answers. None while it runs. One small read of /proc."""
        pid = self.gen.guardian_pid
        if os.getppid() != pid:   # it died: we were handed to another parent
            return {"pid": pid, "gone": True, "problem": f"pid {pid} is gone"}
        st = read_stat(pid)
        if st is not None and not st.stopped:
            return None
        return {"pid": pid, "gone": st is None, "problem": described(pid, st)}
    def _link(self, failed: bool = False) -> dict[str, Any]:
        """How current our view of the owner is (protocol.link); while it is not, or
        when a call to it has just ``failed``, also ``process``: what /proc shows of the
        owner's pid (stopped, gone, ...)."""
        link = self.gen.link.to_wire()
        ident = self.gen.owner_identity
        if (failed or not link["current"]) and ident is not None:
            st = read_stat(ident.pid)
            if st is not None and st.start_ticks != ident.start_ticks:
                st = None   # another process holds its pid now: it is gone
            link["process"] = described(ident.pid, st)
            if (st is None or st.zombie) and self._owner_died():
                link["next"] = OWNER_GONE_NEXT
        return link

    def _owner_died(self) -> bool:
        """Whether the owner that is gone ended without a clean stop (its receipt says
        so, and no reconcile proved its launches gone): its apps may run on. A clean
        stop (a service stop, an owner upgrade's window) stopped them, or hands them on."""
        from .cli.unclean import unclean_end
        ident = self.gen.owner_identity
        try:
            rec = unclean_end(self.gen.layout)
        except (TenureError, OSError):   # an unreadable receipt proves nothing either way
            return False
        return rec is not None and ident is not None and rec.get("instance") == ident.instance
    async def _ask_owner(self, keys: list[str] | None, link: dict[str, Any]
                         ) -> tuple[dict[str, Any], dict[tuple[int, int], Any] | None]:
        """:meth:`_held` and the figures of ``keys`` (all when None; see
        :meth:`_measured`), asked of the owner at once: two calls in flight on its
        connection cost one round trip, not two. With 50 apps, a `kill -9` to its new pid
        seen through `inspect` polled every 0.5 ms went down by 0.4-0.7 ms (medians of 24
        kills, alternated in one run, 3 runs). When every figure is fresh only the held
        sockets are asked, by this task itself: two tasks and a gather cost a third of
        what the backend spends on an `inspect` (50 apps, 5,000 calls, cProfile).

        Not asked at all while ``link`` says our view is not current (the owner has not
        answered for STALE_AFTER): the rows then show what was last seen, without
        figures, at once, instead of after waiting for an owner that is silent."""
        if not link["current"]:
            return {}, {}
        launches = self._launches(keys)
        stale = self._procs.stale(launches)
        if not stale:
            return await self._held(), self._procs.recent(launches)
        held, usage = await asyncio.gather(self._held(), self._measured(launches, stale))
        return held, usage

    async def _held(self) -> dict[str, Any]:
        """The owner's held sockets and fd stores, ``{}`` when it cannot tell (it
        predates them, or it is out of reach: status still answers)."""
        if self.sup.owner_capabilities.get("sockets") != CAPABILITY["sockets"]:
            return {}
        try:
            listing = await self._owner().call("sockets.list", timeout=5.0)
        except TenureError:
            return {}
        return {"sockets": listing["sockets"], "fd_store": listing["fd_store"]}

    async def _measured(self, launches: dict[tuple[int, int], str], stale: list[str]
                        ) -> dict[tuple[int, int], Any] | None:
        """CPU% and memory by (pid, start ticks) of ``launches``, as the owner measured
        them at most FRESH_S ago (backend.usage): it is asked for the ``stale`` ones,
        those without such figures. None if it predates ``metrics`` 1 (then each row
        reads /proc); a process it could not measure (out of reach) has no figures."""
        answer = await owner_metrics(self._owner(), self.sup.owner_capabilities, stale,
                                     usage_only=True)   # a status line's CPU and memory
        if answer is None:
            return None
        self._procs.from_owner(answer)
        if len(self._procs) > 2 * len(self.sup.instances) + 64:   # inspect alone
            self._procs.forget_except(self._live_idents())       # across restarts
        return self._procs.recent(launches)

    def _launches(self, keys: list[str] | None = None) -> dict[tuple[int, int], str]:
        """(pid, start ticks) -> launch key of the instances ``keys`` (all when None)
        that run."""
        insts = self.sup.instances.values() if keys is None else \
            [self.sup.instances[k] for k in keys]
        return {(i.pid, i.start_ticks): i.launch_key for i in insts
                if i.pid is not None and i.start_ticks is not None}

    def _live_idents(self) -> set[tuple[int, int]]:
        return set(self._launches())

    def _row(self, key: str, inst: im.Instance, t: float,
             dropped: dict[tuple[str, str], int] | None,
             measured: dict[tuple[int, int], Any] | None) -> dict[str, Any]:
        usage = self._usage(inst.pid, inst.start_ticks, measured)
        return {"key": key, "stack": inst.app.stack, "app": inst.app.name,
                "instance": inst.index, "state": str(inst.public_state),
                "detail": str(inst.state), "pid": inst.pid,
                "uptime": max(0.0, round(t - inst.launched_at, 1))
                if inst.launched_at and inst.pid else None,
                "restarts": inst.restarts, "ready": inst.state is im.State.READY,
                "generation": inst.generation,
                "last_outcome": str(inst.last_outcome) if inst.last_outcome else None,
                "reason": self.sup.reason(key),
                "status_text": self.sup.status_text.get(inst.launch_key)
                if inst.pid is not None else None,
                "next_start_in": _next_start_in(inst, t),
                "log_dropped": None if dropped is None
                else dropped.get((inst.app.stack, inst.app.name), 0),
                "unrecorded": inst.launch_key in self.gen.owner_uncertain, **usage}

    def _usage(self, pid: int | None, ticks: int | None,
               measured: dict[tuple[int, int], Any] | None) -> dict[str, Any]:
        """The owner's figures (``measured``), or /proc when the owner predates them."""
        if pid is None or ticks is None:
            return {"cpu_percent": None, "rss": None}
        cpu, rss = self._procs.sample(pid, ticks) if measured is None \
            else measured.get((pid, ticks), (None, None))
        return {"cpu_percent": cpu, "rss": rss}

    async def inspect(self, call: Call) -> Any:
        keys = self._targets(call.params["target"], create=False)
        held, usage = await self._ask_owner(keys, self._link())
        link = self._link()    # as of the answer: the owner may have gone silent meanwhile
        t = time.monotonic()
        dropped = self.gen.log_dropped
        out = []
        for k in keys:
            inst = self.sup.instances.get(k)
            if inst is None:   # removed by an apply while the owner was asked
                continue
            row = self._row(k, inst, t, dropped, usage)
            if not link["current"]:
                row = _unknown(row, link["age"])
            row = {**row, "launch_key": inst.launch_key,
                   "command": list(inst.app.command), "restart": str(inst.app.restart),
                   "cwd": inst.app.cwd, "ready_kind": str(inst.app.ready.kind),
                   **checks_view(inst.app, inst.index), "stop": inst.app.stop.to_wire(),
                   "log_retention": inst.app.log_retention,
                   **identity_view(inst.app), **_activation_view(inst, held),
                   "last_error": None if inst.last_error is None
                   else inst.last_error.to_wire(),
                   "last_exit": None if inst.last_exit is None else inst.last_exit.view(),
                   "last_probe": None if inst.last_probe is None
                   else inst.last_probe.view()}
            out.append(row)
        return {"instances": out, "owner_link": link}

def _next_start_in(inst: im.Instance, t: float) -> float | None:
    """Seconds until a backing-off instance is launched again (``t``: now, monotonic);
    None in any other state."""
    due = inst.timers.get(im.Timer.BACKOFF) if inst.state is im.State.BACKOFF else None
    return None if due is None else round(max(0.0, due - t), 1)


def _activation_view(inst: im.Instance, held: dict[str, Any]) -> dict[str, Any]:
    """``sockets`` (what the owner holds for the app: address, inode, accept queue) and
    ``stored_fds`` (the instance's fd store) for inspect; null when the owner cannot
    tell."""
    if not held:
        return {"sockets": None, "stored_fds": None, "fd_store_max": inst.app.fd_store_max}
    app = inst.app
    socks = [{**{k: s[k] for k in ("name", "listen", "inode", "backlog", "queued",
                                   "queue_limit", "used_by")},
              **{k: s.get(k) for k in ("mode", "user", "group")}}   # an older owner: null
             for s in held["sockets"] if (s["stack"], s["app"]) == (app.stack, app.name)]
    stored = [f for st in held["fd_store"]
              if (st["stack"], st["app"], st["instance"]) == (app.stack, app.name, inst.index)
              for f in st["fds"]]
    return {"sockets": socks, "stored_fds": stored, "fd_store_max": app.fd_store_max}


def _unknown(row: dict[str, Any], age: float) -> dict[str, Any]:
    """A row the backend cannot vouch for now: what it last saw, and how long ago."""
    return {**row, "state": "unknown", "last_state": row["state"], "last_seen_age": age,
            "ready": None, "cpu_percent": None, "rss": None, "status_text": None}
