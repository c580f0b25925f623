"""The guardian's coordinator: which backend generation holds control, and every move of
control from one to the next — first start, hot upgrade, rollback, crash recovery.

Every move is an activation row whose phase advances by compare-and-set (guardian.phases
has the table); every grant is written to state.db before the owner is fenced with it,
and a backend starts only after the owner accepted its grant. Nothing here decides about
applications: the backends do.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from protocol.aclient import AsyncClient
from protocol.durable import atomic_write_json, read_json
from protocol.errors import (
    HandoffFailed,
    NotFound,
    OperationInProgress,
    RecoveryBlocked,
    TenureError,
    Uncertain,
)
from protocol.grant import Grant, public_key_text
from protocol.identity import Identity, new_identity

from .backendproc import BackendProcess, control
from .paths import GuardianPaths
from .phases import Kind, Outcome, Phase
from .release import Release, verify
from .state import Activation, StateStore

__all__ = ["Coordinator"]

log = logging.getLogger("tenure.guardian")

OWNER_CONTRACTS = {"stackControl": 1, "logJournal": 1, "notify": 1, "observations": 1}
HANDOFF_KIND = "tenure-handoff"
RECOVERY_BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
NOTHING_RUNS = "no applications run"
KEEP_ARTIFACTS = 40  # handoff records, checkpoints and backend logs kept for diagnosis
OUTCOME_OF = {Phase.ABORTED: Outcome.ABORTED, Phase.ROLLED_BACK: Outcome.ROLLED_BACK,
              Phase.UNCERTAIN: Outcome.UNCERTAIN, Phase.BLOCKED: Outcome.BLOCKED}


@dataclass
class Fault:
    """Test-only: TENURE_GUARDIAN_FAULT=<phase> kills the guardian right after an
    activation reached that phase (the row is committed, nothing after it ran)."""

    phase: str | None = os.environ.get("TENURE_GUARDIAN_FAULT") or None

    def check(self, phase: Phase) -> None:
        if self.phase is not None and self.phase == phase:
            log.warning("test fault: killing the guardian after phase %s", phase)
            os.kill(os.getpid(), signal.SIGKILL)


class Coordinator:
    def __init__(self, paths: GuardianPaths, state: StateStore, key: Ed25519PrivateKey
                 ) -> None:
        self.paths = paths
        self.state = state
        self.key = key
        self.identity = new_identity()
        self.owner: AsyncClient | None = None
        self.owner_identity: Identity | None = None
        self.current: BackendProcess | None = None
        self.command_lock = asyncio.Lock()
        self.blocked: dict[str, Any] | None = None
        self.abort_requested = False
        self.fault = Fault()
        self._recovery_attempts = 0
        self._watchers: set[asyncio.Task[None]] = set()
        self._spare: tuple[str, asyncio.Task[BackendProcess | None]] | None = None

    # -- the owner --------------------------------------------------------------------

    async def connect_owner(self) -> Identity:
        """Connect (pinning the owner instance), pin our key. Raises TenureError."""
        if self.owner is None:
            self.owner = AsyncClient(self.paths.owner_sock, want=OWNER_CONTRACTS,
                                     name="guardian", timeout=60.0)
        welcome = await self.owner.connect()
        self.owner_identity = welcome.identity
        await self.owner.call("guardian.pin",
                              {"public_key": public_key_text(self.key.public_key())})
        return welcome.identity

    async def owner_call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        assert self.owner is not None
        return await self.owner.call(method, params or {})

    async def fence(self, act: Activation) -> int:
        """Grant row first, then the owner; returns the new epoch."""
        ident = self.owner_identity
        assert ident is not None
        epoch = max(self.state.last_epoch(), int((await self.owner_call("status"))["epoch"])) + 1
        grant = Grant(epoch, act.id, act.release, ident.instance, time.time())
        signed = grant.sign(self.key)
        self.state.record_grant(grant, signed.sig)
        await self.owner_call("fence", {"grant": signed.to_wire()})
        return epoch

    # -- phases -----------------------------------------------------------------------

    def advance(self, act: Activation, new: Phase, detail: dict[str, Any] | None = None,
                **fields: Any) -> Activation:
        act = self.state.advance(act.id, act.phase, new, detail, **fields)
        self.write_diagnostics()
        self.fault.check(new)
        return act

    def release(self, release_id: str) -> Release:
        """Verify before every execution; a missing or modified release is an error (and
        with trusted release keys configured, an unsigned or badly signed one)."""
        return verify(self.paths.releases / release_id, release_id,
                      trusted_keys=self.trusted_keys())

    def trusted_keys(self) -> list[Any] | None:
        """The configured trusted release keys, or None when signing is not required.
        Raises StateCorrupt for an unreadable key file (never ignored)."""
        from protocol.durable import read_private
        from protocol.errors import StateCorrupt
        from protocol.grant import load_public_key
        try:
            text = read_private(self.paths.trusted_keys, max_size=65536).decode()
        except FileNotFoundError:
            return None
        try:
            return [load_public_key(line) for line in text.splitlines()
                    if line.strip() and not line.startswith("#")]
        except TenureError as exc:
            raise StateCorrupt(f"{self.paths.trusted_keys}: {exc.msg}") from None

    # -- starting generations ---------------------------------------------------------

    async def launch(self, act: Activation, epoch: int, mode: str,
                     checkpoint: str | None = None, cursor: int = 0,
                     standby: BackendProcess | None = None) -> BackendProcess:
        """Write the handoff record and start the generation (or activate the standby
        started for it); wait for READY."""
        assert self.owner_identity is not None
        release = self.release(act.release)
        if await self.live_backend() is not None:
            raise HandoffFailed("a backend still answers on api.sock; refusing to start a "
                                "second one beside it")
        atomic_write_json(self.paths.handoff_file(act.id), {
            "kind": HANDOFF_KIND, "format": 1, "activation": act.id, "mode": mode,
            "epoch": epoch, "release": act.release, "owner": self.owner_identity.to_wire(),
            "checkpoint": checkpoint, "cursor": cursor})
        if standby is not None:
            await standby.activate(act.id)
            bp = standby
        else:
            bp = await BackendProcess.start(release, self.paths.home, act.id, self.paths.logs)
        self.watch(bp)
        return bp

    async def live_backend(self) -> dict[str, Any] | None:
        """The status of whatever generation answers on api.sock, or None."""
        if not os.path.exists(self.paths.api_sock):
            return None
        try:
            status: dict[str, Any] = await control(self.paths.api_sock, "generation.status",
                                                   timeout=5.0)
            return status
        except TenureError:
            return None

    async def verify_generation(self, epoch: int, checkpoint: dict[str, Any] | None
                                ) -> dict[str, Any]:
        """Owner identity, epoch and (with a checkpoint) inventory — pids, start ticks and
        restart counts — must equal what was handed over. Raises Uncertain."""
        st = await control(self.paths.api_sock, "generation.status")
        assert self.owner_identity is not None
        if st["owner"] != self.owner_identity.to_wire():
            raise Uncertain("the new generation is attached to another owner")
        if st["epoch"] != epoch or not st["ready"]:
            raise Uncertain(f"the new generation holds epoch {st['epoch']}, not {epoch}")
        if checkpoint is not None:
            missing = set(st["adoption"]["missing"])
            want = [_essential(r) for r in checkpoint["inventory"]
                    if r["launch_key"] not in missing]
            got = [_essential(r) for r in st["adoption"]["adopted"]
                   if r["launch_key"] not in missing]
            if want != got:
                raise Uncertain("the adopted inventory differs from the checkpoint",
                                {"checkpoint": len(want), "adopted": len(got)})
        return {"launches": len(st["inventory"]), "missing": sorted(st["adoption"]["missing"])}

    def watch(self, bp: BackendProcess) -> None:
        self.current = bp
        task = asyncio.create_task(self._on_exit(bp))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _on_exit(self, bp: BackendProcess) -> None:
        await bp.exited.wait()
        if bp.expected_exit or self.current is not bp:
            return
        log.error("backend generation %s (pid %d) exited unexpectedly (status %s)",
                  bp.activation, bp.pid, bp.returncode)
        self.current = None
        self.write_diagnostics()
        async with self.command_lock:
            await self.recover_safely()

    async def recover_safely(self, force: bool = False) -> Activation | None:
        """recover_after_crash that never leaves the guardian stuck: any error becomes a
        recorded block with its reason."""
        try:
            return await self.recover_after_crash(force)
        except TenureError as exc:
            log.error("recovery failed: %s", exc)
            self.blocked = {"code": exc.code_str, "reason": str(exc), "at": time.time()}
            self.write_diagnostics()
            return None

    async def watch_owner(self) -> None:
        """Every second: is the owner there, and still the same instance? A new owner
        (after a maintenance restart) gets a fresh epoch and a new generation; the old
        generation, attached to the dead owner, is stopped first."""
        from protocol.errors import OwnerChanged
        while True:
            await asyncio.sleep(1.0)
            try:
                await self.owner_call("status")
                self.write_diagnostics()
            except OwnerChanged:
                async with self.command_lock:
                    await self.follow_new_owner()
            except TenureError as exc:
                log.warning("owner unreachable: %s", exc)

    async def follow_new_owner(self) -> None:
        assert self.owner is not None
        log.warning("the owner was replaced; moving control to the new owner instance")
        if self.current is not None:
            bp, self.current = self.current, None
            await bp.stop(kill_after=5.0)
        self.owner.unpin()
        await self.connect_owner()
        self.blocked = None
        await self.recover_safely()

    # -- first start and recovery -----------------------------------------------------

    async def start_selected(self, kind: Kind = Kind.START, cursor: int = 0) -> Activation:
        sel = self.state.selector()
        if sel.current is None:
            raise NotFound("no release is selected; install and select one first")
        act = self.state.create_activation(kind, sel.current, None, None)
        try:
            epoch = await self.fence(act)
            act = self.advance(act, Phase.FENCED, epoch=epoch)
            bp = await self.launch(act, epoch, str(kind), cursor=cursor,
                                   standby=await self.take_spare(sel.current))
            act = self.advance(act, Phase.STARTED, backend_pid=bp.pid)
            detail = await self.verify_generation(epoch, None)
            act = self.advance(act, Phase.VERIFIED, detail)
            act = self.advance(act, Phase.COMPLETE, outcome="success")
        except TenureError as exc:
            act = self._fail(act, Phase.UNCERTAIN, exc)
            raise
        self.blocked = None
        self._recovery_attempts = 0
        self.prune()
        self.write_diagnostics()
        return act

    def prepare_spare(self) -> None:
        """Start a standby generation of the selected release in the background (a
        guardian start), so the first activation does not wait for an interpreter."""
        release = self.state.selector().current
        if release is None or self._spare is not None:
            return

        async def spawn() -> BackendProcess | None:
            try:
                return await BackendProcess.standby(self.release(release), self.paths.home,
                                                    self.paths.logs)
            except (TenureError, TimeoutError) as exc:
                log.warning("no standby generation: %s", exc)
                return None
        self._spare = (release, asyncio.create_task(spawn()))

    async def take_spare(self, release: str) -> BackendProcess | None:
        """The standby started by :meth:`prepare_spare` if it is of ``release``."""
        if self._spare is None:
            return None
        spare_release, task = self._spare
        self._spare = None
        bp = await task
        if bp is not None and (spare_release != release or not bp.alive()):
            await bp.stop(kill_after=2.0)
            return None
        return bp

    async def drop_spare(self) -> None:
        if self._spare is not None:
            bp = await self.take_spare(self._spare[0])
            if bp is not None:
                await bp.stop(kill_after=2.0)

    def certificate(self) -> dict[str, Any]:
        from .recovery import read_certificate
        return read_certificate(self.paths.recovery_db)

    async def recovery_check(self) -> tuple[bool, str, int]:
        """Whether the owner's live inventory matches the last certificate."""
        from .recovery import digest
        cert = self.certificate()
        inv = (await self.owner_call("inventory"))["launches"]
        if not inv:
            return True, NOTHING_RUNS, 0
        body = cert.get("body") or {}
        if not cert.get("valid"):
            return False, "no valid recovery certificate (the backend was busy)", 0
        assert self.owner_identity is not None
        if body.get("owner") != self.owner_identity.to_wire():
            return False, "the certificate names another owner instance", 0
        if body.get("inventory_digest") != digest(inv):
            return False, "the owner's live inventory differs from the certificate", 0
        return True, "inventory matches the certificate", int(body.get("cursor", 0))

    async def recover_after_crash(self, force: bool = False) -> Activation | None:
        """Restart the selected release under a fresh epoch when it is safe, else block.
        With no application running this is a plain first start."""
        ok, reason, cursor = await self.recovery_check()
        kind = Kind.START if reason == NOTHING_RUNS else Kind.RECOVER
        if not ok and not force:
            self.blocked = {"code": "RECOVERY_BLOCKED", "reason": reason, "at": time.time()}
            act = self.state.create_activation(Kind.RECOVER, self.state.selector().current
                                               or "", None, None)
            self._fail(act, Phase.BLOCKED, RecoveryBlocked(reason))
            log.error("recovery blocked: %s; run `tenure backend recover`", reason)
            return None
        while True:
            try:
                return await self.start_selected(kind, cursor)
            except TenureError as exc:
                delay = RECOVERY_BACKOFF[min(self._recovery_attempts,
                                             len(RECOVERY_BACKOFF) - 1)]
                self._recovery_attempts += 1
                if self._recovery_attempts > len(RECOVERY_BACKOFF):
                    self.blocked = {"code": exc.code_str, "reason": str(exc), "at": time.time()}
                    self.write_diagnostics()
                    return None
                log.error("recovery attempt failed (%s); retrying in %.0f s", exc, delay)
                await asyncio.sleep(delay)

    def _fail(self, act: Activation, phase: Phase, exc: TenureError) -> Activation:
        try:
            act = self.state.advance(act.id, act.phase, phase, {"error": str(exc), **exc.data},
                                     outcome=str(OUTCOME_OF[phase]), code=exc.code_str,
                                     error=exc.msg)
        except TenureError:
            act = self.state.activation(act.id)
        self.write_diagnostics()
        return act

    def prune(self, keep: int = KEEP_ARTIFACTS) -> int:
        """Remove all but the newest ``keep`` handoff records, checkpoints and backend
        logs (never those of the running generation). Returns how many were removed."""
        running = self.current.activation if self.current is not None else None
        removed = 0
        for directory, prefix in ((self.paths.handoffs, ""), (self.paths.logs, "backend-")):
            try:
                entries = [e for e in os.scandir(directory) if e.is_file(follow_symlinks=False)
                           and e.name.startswith(prefix)]
            except FileNotFoundError:
                continue
            entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime, reverse=True)
            for e in entries[keep:]:
                if running and running in e.name:
                    continue
                os.unlink(e.path)
                removed += 1
        return removed

    # -- diagnostics ------------------------------------------------------------------

    def write_diagnostics(self) -> None:
        """supervisor-state.json: what `tenure status` shows when no backend answers."""
        sel = self.state.selector()
        last = self.state.activations(1)
        cert: dict[str, Any] = {}
        try:
            cert = self.certificate()
        except TenureError:
            cert = {"valid": False, "error": "unreadable"}
        body = cert.get("body") or {}
        atomic_write_json(self.paths.diagnostics, {
            "kind": "tenure-supervisor-state", "format": 1, "updated_at": time.time(),
            "guardian": self.identity.to_wire(),
            "owner": self.owner_identity.to_wire() if self.owner_identity else None,
            "epoch": self.state.last_epoch(),
            "selector": {"current": sel.current, "previous": sel.previous,
                         "revision": sel.revision},
            "backend": self.current.to_wire() if self.current else None,
            "last_activation": last[0].to_wire() if last else None,
            "certificate": {"valid": cert.get("valid", False),
                            "age": round(time.time() - body["at"], 1) if "at" in body
                            else None, "launches": body.get("launches")},
            "blocked": self.blocked})

    def status(self) -> dict[str, Any]:
        return read_json(self.paths.diagnostics, "tenure-supervisor-state")

    async def take(self, purpose: str) -> None:
        """One command at a time, in this guardian and across processes (the lease)."""
        if self.command_lock.locked():
            raise OperationInProgress(f"another command runs ({purpose} refused)")
        self.state.take_lease(self.identity, purpose)

    def home(self) -> Path:
        return self.paths.home


def _essential(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["launch_key"], r["pid"], r["start_ticks"], r["restarts"])
