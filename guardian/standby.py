"""Standby generations: a backend interpreter started before it is needed, so that an
activation does not wait for one. An upgrade starts its candidate's standby outside the
pause (with an interpreter prewarmed while the release is verified); a guardian start
starts the selected release's standby (the spare) while it recovers.

A part of guardian.coordinator.Coordinator (which inherits it); the seams a fake
coordinator replaces (standby, prewarm, discard) stay its methods.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable

from protocol.errors import TenureError

from .backendproc import BackendProcess
from .paths import GuardianPaths
from .release import Release
from .state import StateStore

__all__ = ["Standbys"]

log = logging.getLogger("tenure.guardian")


class Standbys:
    """The standby methods of the coordinator (its attributes are set there)."""

    paths: GuardianPaths
    state: StateStore
    deadline: float
    release: Callable[[str], Release]
    current: BackendProcess | None
    candidate: BackendProcess | None
    incumbent: BackendProcess | None
    _spare: tuple[str, asyncio.Task[BackendProcess | None]] | None

    async def standby(self, release_id: str, verified: Release | None = None,
                      warm: asyncio.Task[BackendProcess] | None = None
                      ) -> BackendProcess | None:
        """Start ``release_id``'s interpreter now, outside the pause; it holds nothing.
        ``verified``: the release as verified a moment ago (else it is verified now, while
        an interpreter is prewarmed beside it). ``warm``: a :meth:`prewarm` to run it in.
        A release that cannot stand by is started the plain way later."""
        try:
            if verified is None:
                verified, warm = await self.verify_warming(release_id)
            return await BackendProcess.standby(verified, self.paths.home, self.paths.logs,
                                                self.deadline, await _warmed(warm))
        except TenureError as exc:
            await self.discard(warm)
            log.warning("candidate cannot stand by (%s); it will start cold", exc)
            return None

    async def verify_warming(self, release_id: str, warm: bool = True
                             ) -> tuple[Release, asyncio.Task[BackendProcess] | None]:
        """The release verified now (off the loop) and, with ``warm``, an interpreter
        for its standby prewarmed meanwhile; a prewarm whose release does not verify is
        stopped. Raises what verification raises."""
        task = self.prewarm() if warm else None
        try:
            return await asyncio.to_thread(self.release, release_id), task
        except BaseException:
            await self.discard(task)
            raise

    def prewarm(self) -> asyncio.Task[BackendProcess]:
        """An interpreter for the next standby, started now: it runs nothing of a release
        until one is verified (BackendProcess.prewarm)."""
        return asyncio.create_task(BackendProcess.prewarm(sys.executable, self.paths.home,
                                                          self.paths.logs))

    async def discard(self, warm: asyncio.Task[BackendProcess] | None) -> None:
        """Stop a prewarmed interpreter that will not be used (the process is gone then)."""
        bp = await _warmed(warm)
        if bp is not None and (bp.proc is None or bp.proc.returncode is None):
            await bp.stop(kill_after=2.0)


    def prepare_spare(self) -> None:
        """Start a standby generation of the selected release in the background (a
        guardian start), so the first activation does not wait for an interpreter."""
        release = self.state.selector().current
        if release is None or self._spare is not None:
            return
        self._spare = (release, asyncio.create_task(self.standby(release)))

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

    def generation_releases(self) -> set[str]:
        """The releases of the living backend generations held now (current,
        candidate, incumbent) and of the standby being started. Raises NotFound or
        StateCorrupt when a generation's activation cannot be read."""
        out = {self._spare[0]} if self._spare is not None else set()
        for bp in (self.current, self.candidate, self.incumbent):
            if bp is not None and bp.alive():
                out.add(bp.release or self.state.activation(bp.activation).release)
        return out

    async def drop_spare(self) -> None:
        if self._spare is not None:
            bp = await self.take_spare(self._spare[0])
            if bp is not None:
                await bp.stop(kill_after=2.0)


async def _warmed(warm: asyncio.Task[BackendProcess] | None) -> BackendProcess | None:
    """The prewarmed process, or None when there is none or it could not start."""
    if warm is None:
        return None
    try:
        return await warm
    except (OSError, TenureError) as exc:
        log.warning("no prewarmed interpreter (%s); the standby starts its own", exc)
        return None
