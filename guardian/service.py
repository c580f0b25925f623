"""The guardian's admin API on runtime/guardian.sock: status, releases, upgrade, abort,
rollback, recover. Mutating commands run one at a time (OPERATION_IN_PROGRESS)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from protocol.errors import BadRequest, NotFound, TenureError
from protocol.procfs import silence
from protocol.schema import Field, Schema
from protocol.server import Call, Method
from protocol.window import refuse_in_window

from . import removal
from .cold import recover_safely
from .coordinator import Coordinator
from .forceplan import checked_plan, force_plan, write_evidence
from .handoff import upgrade
from .manifest import is_release_id
from .phases import Kind
from .release import ReleaseStatus, ReleaseSummary, list_releases, summarize
from .selection import check_release
from .selfupgrade import upgrade_guardian
from .trust import install_trusted

log = logging.getLogger("tenure.guardian")

__all__ = ["GuardianService"]

def _release_id(v: Any) -> str | None:
    return None if is_release_id(v) else "must be a release id (64 hex digits)"


S_UPGRADE = Schema(Field("release", str, check=_release_id),
                   Field("check", bool, required=False, default=False))
S_PATH = Schema(Field("path", str))
S_ID = Schema(Field("release", str, check=_release_id))
S_RECOVER = Schema(Field("force", bool, required=False, default=False),
                   Field("dry_run", bool, required=False, default=False),
                   Field("digest", str, required=False))
S_REBIND = Schema(Field("digest", str, required=False, check=lambda v: None if len(v) == 64
                         else "must be the 64-character digest of a rebind plan"))
S_SELECT = Schema(Field("release", str, check=_release_id),
                  Field("start", bool, required=False, default=True))
S_REMOVE = Schema(Field("release", str, check=_release_id),
                  Field("dry_run", bool, required=False, default=False))
S_PRUNE = Schema(Field("keep", int, required=False, default=removal.DEFAULT_KEEP,
                       check=lambda v: None if 0 <= v <= 10_000
                       else "must be a count from 0 to 10000"),
                 Field("dry_run", bool, required=False, default=False))


_NOT_IN_A_WINDOW = frozenset({"select", "upgrade", "guardian upgrade", "rollback",
                              "release remove", "release prune"})
"""What an owner maintenance window must not meet: a handoff cuts its steps through the
backend short and leaves the apps it stopped stopped; a removal could take the release
the window copies for the owner or goes back to. (A recovery is not refused: the
window relies on the guardian following the owner it starts.)"""


class GuardianService:
    def __init__(self, co: Coordinator, on_shutdown: Callable[[], None]) -> None:
        self.co = co
        self.on_shutdown = on_shutdown
        # installs and removals of releases/ one at a time: a removal never meets an
        # install's temporary directory, nor an install that found its release there
        self.releases_lock = asyncio.Lock()

    def methods(self) -> dict[str, Method]:
        return {
            "status": Method(self.status, role="viewer", while_draining=True),
            "receipts": Method(self.receipts, Schema(Field("activation", str)), role="viewer"),
            "metrics": Method(self.metrics, role="viewer", while_draining=True),
            "release.install": Method(self.release_install, S_PATH),
            "release.list": Method(self.release_list, role="viewer"),
            "release.verify": Method(self.release_verify, S_ID, role="viewer"),
            "release.select": Method(self.release_select, S_SELECT),
            "release.rebind": Method(self.release_rebind, S_REBIND),
            "release.remove": Method(self.release_remove, S_REMOVE),
            "release.prune": Method(self.release_prune, S_PRUNE),
            "upgrade": Method(self.upgrade, S_UPGRADE),
            "guardian.upgrade": Method(self.guardian_upgrade, S_UPGRADE),
            "rollback": Method(self.rollback),
            "abort": Method(self.abort),
            "recover": Method(self.recover, S_RECOVER),
            "shutdown": Method(self.shutdown),
        }

    async def _exclusive(self, purpose: str, fn: Callable[[], Awaitable[Any]],
                         handoff: bool = True) -> Any:
        """``fn`` as the one guardian command (the installation lease: any other is
        refused meanwhile). ``handoff`` False: one that starts no backend (a removal of
        releases) does not hold the command lock, so status does not call it a handoff
        in progress and `backend abort` has nothing to abort."""
        if purpose in _NOT_IN_A_WINDOW:
            refuse_in_window(self.co.paths.home, purpose)
        await self.co.take(purpose)
        try:
            if not handoff:
                return await fn()
            async with self.co.command_lock:
                return await fn()
        finally:
            self.co.give_back()
            self.co.write_diagnostics()

    async def status(self, call: Call) -> Any:
        st = self.co.status()
        self.co.write_diagnostics(st)  # the certificate's state and age as of now, once
        link, owner = st.get("owner_link") or {}, st.get("owner") or {}
        if link.get("current") is False and isinstance(owner.get("pid"), int):
            link["process"] = silence(owner["pid"])   # stopped, gone, ... (as status says)
        st["selector"] = {**st["selector"],
                          **await asyncio.to_thread(_installed, self.co, st["selector"])}
        st["lease"] = self.co.state.lease()
        st["handoff_in_progress"] = self.co.command_lock.locked()
        st["recent"] = [a.to_wire() for a in self.co.state.activations(5)]
        return st

    async def metrics(self, call: Call) -> Any:
        """Hot handoffs per outcome and their pause histogram (guardian.counters)."""
        return self.co.state.counters()

    async def receipts(self, call: Call) -> Any:
        act = self.co.state.activation(call.params["activation"])
        return {"activation": act.to_wire(), "receipts": self.co.state.receipts(act.id)}

    async def release_install(self, call: Call) -> Any:
        src = Path(call.params["path"])
        if not src.is_absolute():
            raise BadRequest("give an absolute path to a sealed release")
        async with self.releases_lock:
            rel = await asyncio.to_thread(install_trusted, self.co.paths, src)
        self.co.state.add_release(rel.id)
        if rel.repaired is not None:
            log.warning("release %s: its installed copy did not verify (%s); replaced by "
                        "the verified copy from %s", rel.id, rel.repaired, src)
        return {"release": rel.id, "tenure_version": rel.tenure_version,
                **({"repaired": rel.repaired} if rel.repaired is not None else {})}

    async def release_list(self, call: Call) -> Any:
        """Every entry of releases/ with its cheap status, and the selected and previous
        releases although their directory is gone (status ``missing``): a list without
        them hides that recovery and a rollback have nothing to start."""
        sel = self.co.state.selector()
        releases = self.co.paths.releases

        def work() -> list[ReleaseSummary]:
            listed = list_releases(releases)
            names = {s.name for s in listed}
            gone = [summarize(releases, r) for r in dict.fromkeys((sel.current, sel.previous))
                    if r is not None and r not in names]
            return sorted(listed + gone, key=lambda s: s.name)
        return {"releases": [{"release": s.name, "status": str(s.status),
                              "current": s.name == sel.current,
                              "previous": s.name == sel.previous,
                              **({"reason": s.reason} if s.reason else {})}
                             for s in await asyncio.to_thread(work)]}

    async def release_remove(self, call: Call) -> Any:
        """Remove one installed release nothing needs (guardian.removal); with
        ``dry_run`` only say whether it would go. Answers as :meth:`release_prune`."""
        async def plan() -> tuple[list[removal.Removal], dict[str, list[str]]]:
            return [await removal.plan_remove(self.co, call.params["release"])], {}
        return await self._removing("release remove", call.params["dry_run"], plan)

    async def release_prune(self, call: Call) -> Any:
        """Remove the installed releases beyond the ``keep`` newest that nothing needs,
        and what interrupted installs left. Answers ``{removed: [{release, status,
        bytes}], kept: [{release, why}], bytes, dry_run}``: with ``dry_run`` what would
        go, nothing removed."""
        return await self._removing("release prune", call.params["dry_run"],
                                    lambda: removal.plan_prune(self.co, call.params["keep"]))

    async def _removing(self, purpose: str, dry_run: bool, plan: Callable[[], Awaitable[
            tuple[list[removal.Removal], dict[str, list[str]]]]]) -> Any:
        """What ``plan`` names removed (none with ``dry_run``), while no install or
        removal runs. A removal takes the lease (no other command meanwhile); its dry
        run, which changes nothing, only waits for the install or removal under way."""
        async def go() -> Any:
            async with self.releases_lock:
                planned, kept = await plan()
                done = [] if dry_run else await removal.remove(self.co, planned)
            return _removal_answer(planned, done, kept, dry_run)
        if dry_run:
            return await go()
        return await self._exclusive(purpose, go, handoff=False)

    async def release_verify(self, call: Call) -> Any:
        async with self.releases_lock:   # never a tree an install or removal is changing
            rel = await asyncio.to_thread(self.co.release, call.params["release"])
        return {"release": rel.id, "ok": True, "files": len(rel.runtime.files),
                "signed": rel.signed}

    async def release_rebind(self, call: Call) -> Any:
        """Without ``digest``: the plan (what changed, which releases it would let run).
        With the digest of the plan the operator reviewed: record it."""
        from .interp import rebind, rebind_plan
        co = self.co

        def work() -> dict[str, Any]:
            bindings = co.bindings()
            rels = [(s.name, s.runs_under) for s in list_releases(co.paths.releases)
                    if s.runs_under is not None]
            plan = rebind_plan(rels, bindings)
            digest = call.params.get("digest")
            if digest is None:
                return {**plan, "bound": False}
            rebind(co.paths.interpreters, plan, digest, bindings)
            return {**plan, "bound": True}
        return await asyncio.to_thread(work)

    async def release_select(self, call: Call) -> Any:
        """Select a release and, with ``start``, start it at once when no backend runs
        (the first run, or after a blocked recovery: the operator's choice clears the
        block, as `recover` does). Another release than the one selected is checked
        first as a handoff's ``checked`` phase checks a candidate (guardian.selection),
        so that its start may use the certificate the previous release wrote. A running
        backend is changed only by `upgrade`. Answers ``{selected, started, checked,
        blocked}``."""
        rid = call.params["release"]

        async def go() -> Any:   # as the one command: no removal meanwhile
            async with self.releases_lock:
                release = await asyncio.to_thread(self.co.release, rid)
            self.co.state.add_release(rid)
            if self.co.current is not None and self.co.current.alive():
                sel = self.co.state.selector()
                if sel.current != rid:
                    pid = self.co.current.pid
                    raise BadRequest(f"a backend runs (pid {pid}); a select starts a release "
                                     f"only when none runs: `tenure backend upgrade {rid}` "
                                     "hands over to it, the applications kept running",
                                     {"pid": pid, "selected": sel.current})
                return {"selected": rid, "started": False, "checked": None, "blocked": None}
            sel = self.co.state.selector()
            checked = await check_release(self.co, release) \
                if _changes_release(self.co, sel.current, rid) else None
            sel = self.co.state.select(rid, sel.revision)
            started = None
            if call.params["start"]:
                self.co.blocked = None
                act = await recover_safely(self.co, checked=rid if checked else None)
                started = act.to_wire() if act else None
            return {"selected": sel.current, "started": started, "checked": checked,
                    "blocked": self.co.blocked}
        return await self._exclusive("select", go)

    async def upgrade(self, call: Call) -> Any:
        rid, check = call.params["release"], call.params["check"]
        return await self._exclusive("upgrade", lambda: upgrade(self.co, rid, check))

    async def guardian_upgrade(self, call: Call) -> Any:
        """Move this guardian to another release (guardian.selfupgrade)."""
        rid, check = call.params["release"], call.params["check"]
        return await self._exclusive("guardian upgrade", lambda: upgrade_guardian(
            self.co, rid, check, self.on_shutdown))

    async def rollback(self, call: Call) -> Any:
        prev = self.co.state.selector().previous
        if prev is None:
            raise NotFound("there is no previous release to roll back to")
        return await self._exclusive("rollback",
                                     lambda: upgrade(self.co, prev, kind=Kind.ROLLBACK))

    async def abort(self, call: Call) -> Any:
        if not self.co.command_lock.locked():
            raise NotFound("no handoff is in progress")
        self.co.abort_requested = True
        return {"abort_requested": True}

    async def recover(self, call: Call) -> Any:
        """Retry the certificate check and start (plain), show the plan of a forced
        recovery (``dry_run``), or perform exactly the reviewed plan (``digest``)."""
        p = call.params
        if p["dry_run"]:   # a plan of nothing to recover is one --digest would refuse
            self._refuse_while_serving()   # with why recovery is blocked, and what then
            return {**await force_plan(self.co), "blocked": self.co.blocked}

        async def go() -> Any:
            self._refuse_while_serving()
            evidence = None
            if p["force"] or p.get("digest"):
                evidence = write_evidence(self.co, await checked_plan(self.co,
                                                                       p.get("digest")))
            self.co.blocked = None
            act = await recover_safely(self.co, force=evidence is not None,
                                       evidence=evidence)
            if act is None:
                raise _blocked(self.co.blocked)
            return act.to_wire()
        return await self._exclusive("recover", go)

    def _refuse_while_serving(self) -> None:
        if self.co.current is not None and self.co.current.alive():
            raise BadRequest("a backend generation is running; nothing to recover")

    async def shutdown(self, call: Call) -> Any:
        asyncio.get_running_loop().call_soon(self.on_shutdown)
        return {"shutting_down": True}


def _changes_release(co: Coordinator, current: str | None, rid: str) -> bool:
    """Whether selecting ``rid`` puts another release in control than the one the state
    and the certificate come from: another than the selected one, or the selected one
    while the certificate is another release's. Not on a first run (nothing selected):
    there is no state of another release to check it against. Raises StateCorrupt for
    an unreadable certificate."""
    if current is None:
        return False
    body = co.certificate().get("body") or {}
    return current != rid or body.get("release") not in (None, rid)


def _installed(co: Coordinator, sel: dict[str, Any]) -> dict[str, bool | None]:
    """``current_installed`` and ``previous_installed`` of the selector ``sel``: whether
    that release's directory exists and its RUNTIME.json reads and hashes to its name (a
    cheap check, no file hashed: a status is asked often); None when there is no such
    release. A deleted selected release makes recovery impossible, and status says so
    before a crash finds out. Never raises."""
    releases = co.paths.releases
    return {f"{k}_installed": None if sel.get(k) is None else
            summarize(releases, str(sel[k])).status is ReleaseStatus.OK
            for k in ("current", "previous")}


def _removal_answer(planned: list[removal.Removal], done: list[removal.Removal],
                    kept: dict[str, list[str]], dry_run: bool) -> dict[str, Any]:
    gone = planned if dry_run else done
    return {"removed": [r.to_wire() for r in gone], "bytes": sum(r.bytes for r in gone),
            "kept": [{"release": k, "why": v} for k, v in sorted(kept.items())],
            "dry_run": dry_run}


def _blocked(info: dict[str, Any] | None) -> TenureError:
    from protocol.errors import RecoveryBlocked
    reason = (info or {}).get("reason", "recovery failed")
    then = (info or {}).get("next") or ("`tenure backend recover --dry-run` shows what a "
                                        "forced recovery would adopt")
    return RecoveryBlocked(f"{reason}; {then}", info or {})
