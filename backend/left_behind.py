"""Stopping what outlived a launch's leader, for apps (backend.owner_mutations) and jobs
(backend.jobs.runner) alike.

The owner's ``exit`` event of a launch names ``descendants`` when processes of it (its
process group, children that left it with ``setsid``) were still running as the leader
exited (docs/owner.md). The backend then stops that launch key, as a service manager
stops what is left of a service whose main process ended: the owner's ``stop`` of the
key with no ``policy`` uses the launch's own stop policy, the one it was launched with.
One attempt: what survives it stays known to the owner (its shutdown, and a stop of the
key, end it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from protocol.errors import NotFound, StaleEpoch, TenureError

__all__ = ["announce", "stop_left_behind"]


def announce(log: logging.Logger, who: str, count: int, launch_key: str) -> None:
    """The one log line saying that ``count`` processes of ``launch_key`` outlived its
    leader and are being stopped (docs/config.md quotes it)."""
    log.info("%s: %d process(es) outlived the leader of %s; stopping them", who, count,
             launch_key)


async def stop_left_behind(owner: Any, epoch: int, launch_key: str, who: str,
                           log: logging.Logger,
                           before: Callable[[], None] | None = None) -> None:
    """Ask the owner to stop ``launch_key`` (everything of it still running) with its own
    stop policy; ``before`` runs first (it may raise TenureError: then nothing is sent).
    Every failure is logged here, naming ``who`` and the key; raises only StaleEpoch,
    which the caller answers by fencing itself (a newer generation holds the owner)."""
    try:
        if before is not None:
            before()
        await owner.call("stop", {"launch_key": launch_key}, epoch=epoch, timeout=3600)
    except NotFound:
        pass   # nothing of it is left
    except StaleEpoch:
        raise
    except TenureError as exc:
        log.warning("%s: what outlived %s was not stopped: %s", who, launch_key, exc)
    except Exception:  # never an unhandled task exception: say what was not done
        log.exception("%s: what outlived %s was not stopped", who, launch_key)
