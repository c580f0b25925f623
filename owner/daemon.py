"""The owner daemon: start-up admission, the serving loop, and the staged shutdown.

Exit statuses: 0 clean shutdown, 1 shutdown with a failed stage, 2 bad usage or unsafe
state paths, 3 reconcile required, 4 reconcile found processes alive, 5 already running,
6 the home was lost while it ran (its applications were stopped; protocol.homewatch).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import AlreadyRunning, HomeLost, ReconcileRequired, TenureError
from protocol.homewatch import HomeMark, claim, watch
from protocol.identity import new_identity
from protocol.notify import sd_notify
from protocol.server import RpcServer
from protocol.sighandler import add_signal_handler
from protocol.sockets import same_uid_or_root
from protocol.storage import storage_failure
from protocol.stray import ignore_stray_signals
from protocol.tasks import background

from .access import ServiceAccount
from .cgroups import setup as setup_cgroups
from .evidence import lingering, strays
from .journal import Journal
from .observations import test_knob
from .paths import OwnerPaths
from .procinfo import group_members
from .reaper import become_subreaper, raise_nofile_limit, reserve_fd_table
from .receipt import Receipt, admit_start, read_receipt
from .release import running as running_release
from .service import CAPABILITIES, OwnerService
from .signals import clear_inherited
from .store import OwnerStore

__all__ = ["EXIT", "Owner", "run"]

log = logging.getLogger("tenure.owner")

EXIT = {"clean": 0, "failed": 1, "usage": 2, "reconcile": 3, "alive": 4, "running": 5,
        "home_lost": 6, "internal": 7}


STOP_MARGIN_S = 10.0
"""The applications stage's time beyond the longest stop policy: the last looks for
descendants, the reaps, what no launch accounts for (Procs.stop_unclaimed)."""


@dataclass
class Owner:
    paths: OwnerPaths
    stop_timeout: float = 60.0   # the applications stage's least deadline (_stop_apps)
    account: ServiceAccount | None = None  # system scope: who else may connect
    release_error: dict[str, Any] | None = None  # why the recorded release cannot run
    lost: HomeLost | None = None  # set when the home was lost while serving
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    def request_shutdown(self) -> None:
        self._stop.set()

    async def serve(self, ready: Any = None) -> int:
        """Run until SIGTERM/SIGINT or the shutdown method; returns the exit status.

        Raises ReconcileRequired, UnsafePath, StateCorrupt, PathTooLong, AlreadyRunning
        before anything was started.
        """
        self.paths.prepare(None if self.account is None else self.account.dir_owners)
        self.paths.take_lock()  # released by the kernel when this process ends
        mark = HomeMark.take(self.paths.home)
        # the lock file goes with a deleted home; this name stays while we live
        claimed = claim("owner", self.paths.home)
        try:
            return await self._serve(mark, ready)
        finally:
            if claimed is not None:
                claimed.close()

    async def _serve(self, mark: HomeMark, ready: Any) -> int:
        identity = new_identity()
        store = OwnerStore(self.paths.db)
        try:
            previous = admit_start(self.paths.receipt, self.paths.ack, identity.boot_id,
                                   store.live_launches_of_boot(identity.boot_id),
                                   archive=self.paths.receipts,
                                   lingering=len(lingering(store, identity.boot_id)),
                                   strays=0 if os.path.lexists(self.paths.receipt)
                                   else len(strays(self.paths.home_marker)))
        except BaseException:
            store.close()
            raise
        _retire_old_launches(store, identity.boot_id, previous is not None)
        reserve_fd_table(raise_nofile_limit())   # before the journal's threads start
        become_subreaper()
        # Before any thread starts: the leaf move takes the whole process along anyway,
        # but nothing may be launched until the mode is chosen.
        cgroups = setup_cgroups()
        journal = Journal(self.paths.journal)
        service = OwnerService(self.paths, identity, store, journal, self.request_shutdown)
        service.release = {"running": running_release(self.paths), "error": self.release_error}
        service.launcher.use_cgroups(cgroups)
        server = RpcServer(self.paths.sock, identity, CAPABILITIES, service.methods(),
                           max_buffer=test_knob("TENURE_OWNER_SUBSCRIBER_BUFFER", 8 << 20),
                           authorize=same_uid_or_root if self.account is None
                           else self.account.authorizer(), on_hello=service.grants.bind)
        service.server = server
        # a launch's row is committed at once when no other request could share it
        service.launcher.writes.alone = lambda: server.open_requests <= 1
        try:
            await server.start()
            if self.account is not None:
                self.account.open_socket(self.paths)
        except BaseException:
            service.launcher.close()
            journal.close()
            store.close()
            raise
        receipt = Receipt(self.paths.receipt, identity.instance, identity.pid, identity.boot_id)
        receipt.write()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            add_signal_handler(loop, sig, self.request_shutdown)
        ignore_stray_signals(loop, "owner")
        overflow = background(_report_overflow(service), "log overflow report", log)
        watcher = background(watch(
            mark, lambda loss: self._home_lost(loss, service, server, receipt)),
            "home watch", log)
        log.info("owner %s ready on %s", identity.instance, self.paths.sock)
        if ready is not None:
            ready(identity)
        await self._stop.wait()
        overflow.cancel()
        watcher.cancel()
        code = await self._shutdown(service, server, journal, store, receipt)
        return EXIT["home_lost"] if self.lost is not None else code

    def _home_lost(self, loss: HomeLost, service: OwnerService, server: RpcServer,
                   receipt: Receipt) -> None:
        """Nobody can reach us, our records are gone with the directory, and a new owner
        on the path would launch everything again: stop the applications and end, as on
        SIGTERM, but write and remove nothing by path (the receipt, the sockets), since
        whatever is at those paths now belongs to whoever made the new directory."""
        self.lost = loss
        receipt.detached = True
        server.disown()
        service.launcher.notify.disown()
        log.error("stopping every application and exiting (%s)", loss.code.value)
        self.request_shutdown()

    async def _shutdown(self, service: OwnerService, server: RpcServer, journal: Journal,
                        store: OwnerStore, receipt: Receipt) -> int:
        launcher = service.launcher
        sd_notify("STOPPING=1")
        server.begin_drain()
        await _stage(receipt, "watchers", _close_notify, launcher)
        await _stage(receipt, "applications", _stop_apps, service, self.stop_timeout)
        await _stage(receipt, "processes", _confirm_gone, service)
        await _stage(receipt, "state", _check_state, store, launcher)
        await _stage(receipt, "logs", _flush_logs, launcher, journal)
        await _stage(receipt, "rpc", _close_rpc, server)
        await _stage(receipt, "storage", _close_storage, launcher, store)
        receipt.stage("complete", receipt.failed_stage is None,
                      f"failed at {receipt.failed_stage}" if receipt.failed_stage else "")
        log.info("owner shutdown %s%s", receipt.state, "" if receipt.unwritten is None
                 else f" (its receipt could not be written: {receipt.unwritten})")
        clean = receipt.failed_stage is None and receipt.unwritten is None
        return EXIT["clean"] if clean else EXIT["failed"]


def _retire_old_launches(store: OwnerStore, boot_id: str, reconciled: bool) -> None:
    """Launches of a previous owner are over: proven gone by reconcile, or their boot
    ended. (With neither, admit_start has already refused to start.)"""
    old = store.live_launches()
    if old:
        store.mark_lost([r.launch_key for r in old])
        log.warning("marked %d launches of the previous owner lost (%s)", len(old),
                    "reconciled" if reconciled else "previous boot")
    store.clear_descendants()  # proven gone, or of another boot, or no longer running


async def _stage(receipt: Receipt, name: str, fn: Any, *args: Any) -> None:
    try:
        if name == os.environ.get("TENURE_OWNER_FAULT"):   # test-only: this stage fails
            raise RuntimeError(f"test fault in shutdown stage {name}")
        detail = await fn(*args)
        receipt.stage(name, True, detail or "")
    except Exception as exc:
        log.exception("shutdown stage %s failed", name)
        receipt.stage(name, False, f"{type(exc).__name__}: {exc}")


async def _close_notify(launcher: Any) -> str:
    launcher.notify.close()
    return ""


async def _stop_apps(service: OwnerService, floor: float) -> str:
    """Stop every launch with its own policy, in the stop order's levels however long
    they take, then what no launch accounts for (Procs.stop_unclaimed). The stage's
    deadline is the levels' longest policies, summed, and STOP_MARGIN_S, at least
    ``floor``: a stop that outlives its own policy's SIGKILL is stuck (the kernel), and
    the stage says so rather than waiting forever."""
    budget = max(floor, service.launcher.stop_budget() + STOP_MARGIN_S)
    try:
        async with asyncio.timeout(budget):
            results = await service.launcher.stop_all()
    except TimeoutError:
        raise RuntimeError(f"the applications were not confirmed stopped within {budget:g} "
                           "s (the longest stop policy of each level of the stop order, and "
                           "more)") from None
    bad = [k for k, r in results if isinstance(r, BaseException) or r.outcome == "timeout"]
    if bad:
        raise RuntimeError(f"{len(bad)} launches not confirmed stopped: {bad[:5]}")
    unclaimed = await service.procs.stop_unclaimed()
    if unclaimed:
        log.warning("stopped %d process(es) no launch accounts for: %s", len(unclaimed),
                    " ".join(map(str, unclaimed[:20])))
    return f"{len(results)} stopped" + (f", {len(unclaimed)} unclaimed" if unclaimed else "")


async def _confirm_gone(service: OwnerService) -> str:
    service.procs.reap_orphans()
    service.procs.track()
    left = [k for k, r in service.launcher.live.items()
            if r.pgid is not None and group_members(r.pgid)]
    lingering = service.procs.lingering()
    unclaimed = service.procs.unclaimed()   # what even SIGKILL did not end
    if service.procs.pids() or left or lingering or unclaimed:
        raise RuntimeError(f"processes remain: {service.procs.pids()[:5]} {left[:5]} "
                           f"{lingering[:5]} {unclaimed[:5]}")
    return ""


async def _check_state(store: OwnerStore, launcher: Any) -> str:
    launcher.record_descendants()  # what still runs stays evidence; the rest is forgotten
    unrecorded = launcher.retry_uncertain()
    if unrecorded:
        raise RuntimeError(f"{len(unrecorded)} launches could not be recorded: "
                           f"{unrecorded[:5]}")
    return f"epoch {store.epoch()}"


async def _flush_logs(launcher: Any, journal: Journal) -> str:
    drained = await launcher.wait_drained(5.0)
    await asyncio.to_thread(journal.close)
    if not drained:
        raise RuntimeError("some pipes did not reach end of file")
    return f"overflow total {journal.overflow_total}"


async def _close_rpc(server: RpcServer) -> str:
    try:
        async with asyncio.timeout(10.0):
            await server.wait_idle()
    finally:
        await server.close()
    return ""


async def _close_storage(launcher: Any, store: OwnerStore) -> str:
    launcher.close()
    store.close()
    return ""


async def _report_overflow(service: OwnerService) -> None:
    """Dropped log lines are never silent: one event per source per second."""
    while True:
        await asyncio.sleep(1.0)
        for src, n in service.journal.take_overflow().items():
            service.ring.emit("log_overflow", stack=src.stack, app=src.app,
                              instance=src.instance, generation=src.generation, dropped=n)


def run(paths: OwnerPaths, service_account: str | None = None,
        err: TenureError | None = None) -> int:
    """Entry point of ``python -m owner``: serve, mapping refusals to exit statuses.
    ``err`` says why the recorded release could not run (owner.release.follow)."""
    cleared = clear_inherited()
    if cleared:
        log.info("signals ignored or blocked by whoever started the owner, reset so "
                 "that apps start with the defaults: %s", ", ".join(cleared))
    try:
        account = None if service_account is None else ServiceAccount.lookup(service_account)
        return asyncio.run(Owner(paths, account=account,
                                 release_error=err.to_wire() if err else None
                                 ).serve(_announce))
    except ReconcileRequired as exc:
        log.error("%s", exc)
        return EXIT["reconcile"]
    except AlreadyRunning as exc:
        log.error("%s", exc)
        return EXIT["running"]
    except TenureError as exc:
        log.error("%s", exc)
        return EXIT["usage"]
    except Exception as exc:   # boundary: the unexpected ends coded, with its cause
        stored = storage_failure(exc, "the owner's start")
        if stored is not None:   # a full or failing disk: said as such, no traceback
            log.error("%s", stored)
            return EXIT["usage"]
        log.critical("INTERNAL: the owner could not go on: %s: %s", type(exc).__name__, exc,
                     exc_info=exc)
        return EXIT["internal"]


def _announce(ident: Any) -> None:
    print(f"READY {ident.instance}", flush=True)
    sd_notify(f"READY=1\nSTATUS=owner {ident.instance} serving\nMAINPID={ident.pid}")


def receipt_state(paths: OwnerPaths) -> str | None:
    rec = read_receipt(paths.receipt)
    return None if rec is None else str(rec["state"])
