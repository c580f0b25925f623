"""The reconciler's calls that change what the owner runs (backend.supervisor).

It owns launches (sent until the owner answers, no try spent while no owner can take
one or a disk keeps it from being recorded), stops (asked again until the owner
confirms them), the stop of what a run left running (the next launch of the instance
waits for it), tenure lines in an app's log, and the socket retune and sweep. Each
launch and stop is counted in flight until it ended, and the recovery certificate stops
vouching before it is sent. A call the owner refuses with STALE_EPOCH fences the
reconciler.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from protocol.aclient import NotSent
from protocol.errors import (
    BadRequest,
    ConnectFailed,
    Internal,
    LaunchFailed,
    NotFound,
    OwnerChanged,
    ShuttingDown,
    StackFenced,
    StaleEpoch,
    StorageFailed,
    TenureError,
    TransportLost,
    UnknownMethod,
)
from protocol.storage import storage_failure

from . import activation, explain
from . import instance as im
from .enforce import app_env, launch_fields
from .left_behind import announce, stop_left_behind
from .model import App, Config

if TYPE_CHECKING:
    from .supervisor import Supervisor

__all__ = ["LAUNCH_TRIES", "OWNER_AWAY_POLL_S", "OwnerCalls", "OwnerMutations",
           "fenced_off"]

log = logging.getLogger("tenure.backend")

_ENDED = ("exited", "lost")   # owner launch states of a key that cannot run again
LAUNCH_TRIES = 5              # a launch the owner answers with an error is given up after
OWNER_AWAY_POLL_S = 1.0       # and one that no owner can take asked again this often


class OwnerCalls(Protocol):
    """What the reconciler needs of the owner connection (protocol.aclient.AsyncClient;
    backend.testing.FakeOwner in unit tests)."""

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   epoch: int | None = None, timeout: float | None = None,
                   still: Callable[[], bool] | None = None) -> Any: ...


def fenced_off(key: str) -> ShuttingDown:
    """The error for what is asked of ``key`` once the reconciler is fenced."""
    return ShuttingDown(f"{key}: this backend generation is fenced off (a newer one holds "
                        "the owner)", {"instance": key})


class OwnerMutations:
    """The owner mutations of ``sup``'s instances. Construct inside the running loop."""

    def __init__(self, sup: Supervisor, on_mutation: Callable[[str], None],
                 sleep: Callable[[float], Awaitable[None]],
                 spawn: Callable[[Awaitable[Any]], None]) -> None:
        """``on_mutation``, ``sleep``: as Supervisor takes them; ``spawn`` runs a task
        the reconciler cancels when it closes."""
        self._sup = sup
        self._on_mutation = on_mutation
        self._sleep = sleep
        self._spawn = spawn
        self.owner_notes = True                  # False: the owner predates logNotes 1
        self._stop_trouble: dict[str, str] = {}  # launch key -> why its stop is retried
        self._launch_trouble: dict[str, str] = {}   # and why its launch waits (storage)
        self._stop_sent: dict[str, float] = {}   # launch key -> first stop sent (monotonic)
        # instance key -> done once what its last run left running is stopped: its next
        # launch waits for it (docs/config.md, stop)
        self._left: dict[str, tuple[int, asyncio.Future[None]]] = {}
        self._calls: dict[object, tuple[str, str, float]] = {}   # in flight: what, key, since
        # apps (keys) with a held socket the last sweep left because a launch used it
        # while the config no longer named it: the end of their processes sweeps again
        self._sockets_in_use: frozenset[str] = frozenset()

    @property
    def in_flight(self) -> int:
        """Owner mutations sent and not answered yet: a drain waits for zero."""
        return len(self._calls)

    def in_flight_calls(self) -> list[str]:
        """The owner calls in flight, oldest first: ``stop s/a/0/3 (for 12.5 s)``."""
        t = time.monotonic()
        return [f"{what} {key} (for {t - since:.1f} s)"
                for what, key, since in sorted(self._calls.values(), key=lambda c: c[2])]

    def launch(self, key: str, inst: im.Instance, launch_key: str) -> Awaitable[None]:
        """Launch ``launch_key`` of instance ``key`` and feed it the result."""
        return self._mutate(key, launch_key,
                            functools.partial(self._launch, inst, launch_key), "launch")

    def stop(self, key: str, launch_key: str) -> Awaitable[None]:
        """Stop ``launch_key`` of instance ``key`` and feed it the result."""
        return self._mutate(key, launch_key, functools.partial(self._stop, launch_key),
                            "stop")

    async def _mutate(self, key: str, launch_key: str,
                      op: Callable[[], Awaitable[im.Event | None]], what: str) -> None:
        """Run one owner mutation (``what``: launch, stop); feed its result if the
        instance is still on that launch. ``in_flight`` counts it until it ended, whatever
        it raised: a drain waits for zero, and names what it waited for
        (:meth:`in_flight_calls`). A fenced backend stops acting for good."""
        sup = self._sup
        if sup.fenced:
            return
        token = object()
        self._calls[token] = (what, launch_key, time.monotonic())
        event: im.Event | None = None
        try:
            event = await op()
        except StaleEpoch as exc:
            sup.fence(f"the owner refused a call: {exc.msg}")
        finally:
            del self._calls[token]
            sup.wake()
        inst = sup.instances.get(key)
        if event is not None and inst is not None and inst.launch_key == launch_key:
            sup.feed(key, event)

    def _invalidate(self, method: str) -> None:
        """The certificate stops vouching before ``method`` is sent. Raises Internal when
        that failed: the call must not be sent (the caller retries it)."""
        try:
            self._on_mutation(method)
        except Exception as exc:  # whatever broke, the certificate may still vouch
            what = f"invalidating the recovery certificate before {method}"
            failed = storage_failure(exc, what) or \
                Internal(f"{what} failed: {exc}")
            failed.data.update(method=method, not_sent=True)   # the owner was not asked
            raise failed from exc

    # -- launching --------------------------------------------------------------------

    async def _launch(self, inst: im.Instance, launch_key: str) -> im.Event | None:
        sup = self._sup
        app = inst.app
        key = f"{app.stack}/{app.name}/{inst.index}"
        if self.leaving(key):
            await self._left_stopped(key)
        env = {**app_env(sup.base_env, app), "TENURE_STACK": app.stack,
               "TENURE_APP": app.name, "TENURE_INSTANCE": str(inst.index)}
        params = {"launch_key": launch_key, "stack": app.stack, "app": app.name,
                  "instance": inst.index, "generation": inst.generation,
                  "argv": list(app.command), "env": env, "cwd": app.cwd,
                  "stop": app.stop.to_wire(), **launch_fields(app),
                  **activation.launch_sockets(app)}
        if (app.sockets or app.fd_store_max) and \
                sup.owner_capabilities.get("sockets") != activation.CAPABILITY["sockets"]:
            # an older owner would ignore the keys and start the app without its fds
            log.warning("%s: the owner predates socket activation", launch_key)
            return im.LaunchFailed("CAPABILITY_MISSING")
        try:
            return await self._launch_tries(inst, key, launch_key, params)
        finally:
            self._launch_trouble.pop(launch_key, None)

    async def _launch_tries(self, inst: im.Instance, key: str, launch_key: str,
                            params: dict[str, Any]) -> im.Event | None:
        """Send the launch until the owner answers it, at most LAUNCH_TRIES times; no
        try is spent while no owner can take it, or while a full or failing disk keeps
        it from being recorded (the backend's own write before it, or the owner's row):
        neither is the app's failure. A try spent there made an app that exited on a
        full disk `failed` (start limit) within seconds, its RESTARTS counting launches
        never sent."""
        sup = self._sup
        last: TenureError = TransportLost("no attempt was made")
        tries, waiting = 0, False
        while tries < LAUNCH_TRIES and not sup.fenced:  # a launch key is idempotent:
            if not self._still_starting(key, inst, launch_key):   # retrying is safe
                log.info("%s: not launched: the instance was stopped or started anew "
                         "while its launch waited", launch_key)
                return None
            try:
                self._invalidate("launch")
                # asked again once its turn among the owner calls came (a stack stop may
                # hold them all meanwhile): a stop asked while it waited withdraws it
                r = await sup.owner.call("launch", params, epoch=sup.epoch, still=(
                    lambda: self._still_starting(key, inst, launch_key)))
                if r.get("state") in _ENDED:
                    return self._spent(launch_key, r, params["generation"])
                if not isinstance(r.get("pid"), int) or not isinstance(r.get("start_ticks"),
                                                                       int):
                    # a row an earlier try left 'starting' (its failure could not be
                    # recorded: a full disk): no process runs under the key
                    failed = LaunchFailed(f"{launch_key}: the owner holds no process for "
                                          f"it (its row says {r.get('state')})",
                                          {"launch_key": launch_key})
                    return im.LaunchFailed(failed.code_str, explain.launch_error(
                        failed, params["generation"]))
                return im.Launched(r["pid"], r["start_ticks"])
            except StaleEpoch:
                raise
            except NotSent:
                log.info("%s: not launched: the instance was stopped or started anew "
                         "while its launch waited for its turn", launch_key)
                return None
            except (LaunchFailed, StackFenced, BadRequest) as exc:
                log.warning("%s: launch refused: %s", launch_key, exc)
                return im.LaunchFailed(exc.code_str,
                                       explain.launch_error(exc, params["generation"]))
            except TenureError as exc:  # not sent, unknown outcome, owner away: retry
                last = exc
                if isinstance(exc, StorageFailed):   # nothing was launched: wait
                    said = explain.not_done(exc, params["generation"]).text
                    if self._launch_trouble.get(launch_key) is None:
                        log.error("%s: %s; tried again each second", launch_key, said)
                    self._launch_trouble[launch_key] = f"{said}; trying again each second"
                    await self._sleep(1.0)
                    continue
                if self.owner_away(exc):
                    # Not the app's failure: no attempt is spent while no owner can
                    # take the launch (it ends if this generation is fenced)
                    if not waiting:
                        log.warning("%s: the owner is away (%s); the launch waits for "
                                    "it", launch_key, exc)
                    waiting = True
                    await self._sleep(OWNER_AWAY_POLL_S)
                    continue
                tries += 1
                log.warning("%s: launch not done (%s); retrying", launch_key, exc)
                await self._sleep(0.5)
        if sup.fenced:
            return None
        return im.LaunchFailed(last.code_str, explain.not_done(last, params["generation"]))

    def owner_away(self, exc: TenureError) -> bool:
        """Whether a launch that failed with ``exc`` found no owner to take it: none
        listens, it is shutting down, another instance answers (this generation is then
        replaced), or the owner link is not connected (a hung or restarting owner)."""
        return isinstance(exc, ConnectFailed | ShuttingDown | OwnerChanged) or \
            not self._sup.owner_answers()

    def _spent(self, launch_key: str, row: dict[str, Any], generation: int) -> im.Event:
        """The owner's answer for a launch key it had used before (this backend's state
        is older than the owner's: backend.db lost, or an older checkpoint), whose launch
        has ended: it is reported as it was, started and ended, never as running; the
        exit follows the start as its observation would (an observation of it that
        comes first makes this one stale, ignored)."""
        log.warning("%s: launch key used before; that launch is %s", launch_key,
                    row["state"])
        if not isinstance(row.get("pid"), int) or not isinstance(row.get("start_ticks"), int):
            return im.LaunchFailed("CONFLICT", explain.spent_key(launch_key, row["state"],
                                                                 generation))
        ended = row.get("exit") or {}
        asyncio.get_running_loop().call_soon(self._sup.on_observation, {
            "kind": "exit", "launch_key": launch_key, "exit_code": ended.get("exit_code"),
            "signal": ended.get("signal"), "core_dumped": ended.get("core_dumped")})
        return im.Launched(row["pid"], row["start_ticks"])

    def _still_starting(self, key: str, inst: im.Instance, launch_key: str) -> bool:
        """Whether ``inst`` still waits for the launch of ``launch_key``, asked before
        each attempt to send it. A stop asked while the launch waited (for what the last
        run left running, for an owner away, to be tried again) found no process under
        the key (the owner had not seen it: NotFound, so the instance is stopped), and a
        restart gave it a new key: sent after that, the launch would run a process
        nobody tracks."""
        return self._sup.instances.get(key) is inst and inst.launch_key == launch_key \
            and inst.state is im.State.STARTING

    def _launch_in_flight(self, launch_key: str) -> bool:
        """Whether a launch of ``launch_key`` is being sent to the owner: an owner that
        predates waiting for it answers a stop of the key NotFound until it has spawned
        the process, and a stop that took that for 'gone' left the process untracked."""
        return any(what == "launch" and key == launch_key
                   for what, key, _since in self._calls.values())

    # -- stopping ---------------------------------------------------------------------

    async def _stop(self, launch_key: str) -> im.Event | None:
        """Stop ``launch_key``, asked again each second until the owner confirms it;
        meanwhile the last failure is the instance's reason (``why``)."""
        sup = self._sup
        try:
            while not sup.fenced:
                try:
                    self._invalidate("stop")
                    self._save_stopping(launch_key)
                    self._stop_sent.setdefault(launch_key, time.monotonic())
                    done = await sup.owner.call("stop", {"launch_key": launch_key},
                                                epoch=sup.epoch, timeout=3600)
                    ended = done.get("exit") if isinstance(done, dict) else None
                    return im.Stopped(ended if isinstance(ended, dict) else None)
                except NotFound:
                    if self._launch_in_flight(launch_key):   # not seen by the owner yet
                        await sup.wait(lambda: not self._launch_in_flight(launch_key),
                                       None)
                        continue   # asked again: its answer had a process, or not
                    return im.Stopped()   # no process: already gone
                except StaleEpoch:
                    raise
                except TenureError as exc:  # not sent, unknown outcome, owner away: again
                    log.error("%s: stop not confirmed (%s); trying again", launch_key, exc)
                    self._stop_trouble[launch_key] = explain.stop_unconfirmed(exc)
                    await self._sleep(1.0)
            return None
        finally:
            self._stop_trouble.pop(launch_key, None)
            self._stop_sent.pop(launch_key, None)

    def _save_stopping(self, launch_key: str) -> None:
        """Save the instances (the one being stopped among them) before its stop is
        sent: a generation that recovers after a crash then finds it stopping, and
        leaves it stopped, instead of taking the owner's word that it stopped for a stop
        of the owner's own, and starting it again. A save that fails is logged; the stop
        goes on (a stop undone by a crash is the lesser harm)."""
        try:
            self._sup.save_before_stop()
        except Exception as exc:  # the stop must not wait on the disk
            log.warning("%s: the stop could not be saved before it was sent (%s)",
                        launch_key, exc)

    def _stopping(self, inst: im.Instance) -> str | None:
        """``SIGTERM sent 12s ago; SIGKILL in 8s`` (then ``SIGKILL sent 3s ago``) while
        the owner carries out the stop of ``inst``'s launch, by the app's stop policy:
        an app that ignores its stop signal showed `stopping` with nothing said for the
        whole timeout. None before the stop was sent, and while the owner does not
        answer (what it does then is not known)."""
        since = self._stop_sent.get(inst.launch_key)
        if since is None or not self._sup.owner_answers():
            return None
        stop, took = inst.app.stop, time.monotonic() - since
        sig = f"SIG{stop.signal}"
        if sig == "SIGKILL":
            return f"SIGKILL sent {took:.0f}s ago"
        if took < stop.timeout:
            return f"{sig} sent {took:.0f}s ago; SIGKILL in {stop.timeout - took:.0f}s"
        return f"{sig} sent {took:.0f}s ago; SIGKILL sent {took - stop.timeout:.0f}s ago"

    def why(self, key: str, inst: im.Instance) -> str | None:
        """What only the owner calls can say of instance ``key`` (``inst``): that what
        its last run left running is being stopped (its next launch waits for that),
        why its stop is being tried again (or how far the owner is with it), or why its
        launch waits; None otherwise."""
        left = self._left.get(key)
        if left is not None:   # said beside why the run ended (explain.reason)
            said = f"stopping {left[0]} process(es) the last run left running"
            return said if inst.state is not im.State.STARTING else \
                "; ".join(filter(None, (_last_run(inst), said)))
        if inst.state in (im.State.STOPPING, im.State.RESTARTING):
            return self._stop_trouble.get(inst.launch_key) or self._stopping(inst)
        if inst.state is im.State.STARTING:
            return self._launch_trouble.get(inst.launch_key)
        return None

    # -- what a run left running ------------------------------------------------------

    def stop_left_behind(self, key: str, launch_key: str, count: int) -> None:
        """Stop what outlived an exited launch's leader (its process group and tracked
        descendants) with the app's stop policy (backend.left_behind): the instance's
        next launch waits until that stop ended (a restart must not run beside it), and
        meanwhile its reason says so (``why``)."""
        sup = self._sup
        announce(log, key, count, launch_key)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._left[key] = (count, done)

        async def stop() -> None:
            await stop_left_behind(sup.owner, sup.epoch, launch_key, key, log,
                                   lambda: self._invalidate("stop"))   # StaleEpoch: fenced

        async def stop_then_go() -> None:
            try:
                await self._mutate(key, launch_key, stop, "left-running stop")
            finally:
                done.set_result(None)
                if self._left.get(key, (0, None))[1] is done:
                    del self._left[key]
                sup.wake()
        self._spawn(stop_then_go())

    def leaving(self, key: str) -> bool:
        """Whether what the last run of ``key`` left running is being stopped."""
        return key in self._left

    async def _left_stopped(self, key: str) -> None:
        """Once what the last run of ``key`` left running is stopped (at once when it
        left nothing)."""
        while (left := self._left.get(key)) is not None:
            await asyncio.shield(left[1])

    # -- the app's log, its sockets ---------------------------------------------------

    async def note(self, inst: im.Instance, text: str) -> None:
        """A tenure line in the app's own log stream (owner ``logs.note``). Best effort:
        an owner that predates logNotes 1 is asked once, then never again."""
        sup = self._sup
        if sup.fenced or not self.owner_notes:
            return
        app = inst.app
        try:
            await sup.owner.call("logs.note", {
                "stack": app.stack, "app": app.name, "instance": inst.index,
                "generation": inst.generation, "text": text}, epoch=sup.epoch)
        except UnknownMethod:
            self.owner_notes = False
            log.info("the owner predates logNotes 1: no tenure lines in app logs")
        except TenureError as exc:
            log.warning("%s: could not write %r to its log: %s", inst.launch_key, text, exc)

    async def retune_sockets(self, app: App) -> None:
        """Have the owner give ``app``'s held sockets their configured backlog, mode and
        owner now (backend.activation.retune). Raises what the owner raised
        (SocketUnavailable: the operation fails, naming the socket) and ShuttingDown
        once fenced."""
        sup = self._sup
        if sup.fenced:
            raise fenced_off(app.key)
        try:
            await activation.retune(sup.owner, sup.epoch, app)
        except StaleEpoch as exc:
            sup.fence(f"the owner refused a socket update: {exc.msg}")
            raise

    async def sweep_sockets(self, config: Config) -> None:
        """Let the owner close the sockets and fd stores ``config`` no longer names
        (backend.activation.sweep). Raises nothing."""
        sup = self._sup
        if sup.fenced or sup.owner_capabilities.get("sockets") != \
                activation.CAPABILITY["sockets"]:
            return
        try:
            done = await activation.sweep(sup.owner, sup.epoch, config)
        except StaleEpoch as exc:
            sup.fence(f"the owner refused the socket sweep: {exc.msg}")
            return
        except Exception:
            log.exception("sockets: the sweep failed")
            return
        if done is None:
            return
        self._sockets_in_use = done.in_use
        if done.closed or done.cleared:
            log.info("sockets: closed %d, fd stores cleared %d", done.closed, done.cleared)

    def process_ended(self, ran: App, config: Config) -> None:
        """A process that ran ``ran`` ended: sweep now when that may have freed a held
        socket ``config`` no longer names (backend.activation.sweep_due). Raises
        nothing."""
        if activation.sweep_due(config, ran, self._sockets_in_use):
            self._spawn(self.sweep_sockets(config))


def _last_run(inst: im.Instance) -> str | None:
    """How the run before ``inst``'s launch under way ended, when it exited (a restart
    that waits for what that run left running): explain.reason says nothing of a
    starting instance."""
    ended = inst.last_exit
    return ended.text if ended is not None and ended.generation == inst.generation - 1 \
        else None
