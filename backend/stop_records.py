"""The levels of a `tenure stop` not asked yet, kept in backend.db (``stops_to_ask``), so
that a stop cut by the end of its generation (a crash, a handoff) is finished by the
generation that serves next, in order, as backend.api_instances asks them in memory.

Invariants, kept for every instance key:

- before the first level of a stop is asked, the keys of every later level are recorded
  with their level, in one transaction; a failure to record asks nothing;
- each level's ask forgets its keys' records, in the step that asks them (and only the
  records of the generation that asks: one fenced off never forgets a newer one's);
- the latest command wins, after a crash as in memory: a command that takes a key (what
  makes StartWaits.started_since name it: a `tenure start` or `restart` of it, a
  `stack start` of its stack, an apply that starts or restarts it) forgets its record
  before it feeds its start, and so does an apply that removes it;
- a record is read strictly: one that cannot be read is left as it is and stops nothing.

A generation that serves (its start, or the end of an aborted handoff) takes the records
over (:meth:`StopsToAsk.left`) and asks them in the background
(backend.api_instances.InstanceCommands.resume_stops).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from protocol.errors import StaleEpoch

from . import instance as im

if TYPE_CHECKING:
    from .store import BackendStore
    from .supervisor import Supervisor

__all__ = ["STOP_TIMEOUT", "StopsToAsk"]

log = logging.getLogger("tenure.backend")

STOP_TIMEOUT = 300.0   # seconds a stop a new generation finishes waits for its levels


class StopsToAsk:
    """The records of one generation (``activation``) in ``store``. ``on_stale`` is
    told first when a write finds that a newer generation claimed backend.db
    (Supervisor.fence: that one has the apps now, this one must stop acting)."""

    def __init__(self, store: BackendStore, activation: str,
                 on_stale: Callable[[str], None]) -> None:
        self.store = store
        self.activation = activation
        self.on_stale = on_stale
        self._damage_told = False   # said once a generation

    def record(self, levels: Sequence[Sequence[str]], command: str) -> None:
        """Before ``levels[0]`` is asked: record the levels after it as ``command``'s
        (its earlier records of ``levels[0]`` forgotten: asked now). Nothing to record
        for a stop of one level. Raises what the store raises (StaleEpoch,
        sqlite3.Error): then nothing may be asked."""
        if len(levels) > 1:
            with self._fenced_if_stale():
                self.store.want_stops(levels[1:], command, self.activation,
                                      asked=levels[0])

    def asked(self, keys: Sequence[str]) -> None:
        """``keys`` were asked to stop: forget this generation's records of them. A
        failure is logged, not raised: the stop is asked all the same, and a generation
        that takes over asks it again (idempotent)."""
        try:
            self.store.drop_stops(keys, self.activation)
        except Exception as exc:
            log.error("the stops asked of %s could not be forgotten in backend.db (%s); "
                      "a generation that takes over asks them again", ", ".join(keys), exc)

    def taken(self, keys: Sequence[str]) -> None:
        """A later command takes ``keys``: forget the stops recorded of them, whoever
        recorded them. Raises what the store raises (StaleEpoch, sqlite3.Error): then
        the command must do nothing."""
        with self._fenced_if_stale():
            self.store.drop_stops(keys, None)

    @contextlib.contextmanager
    def _fenced_if_stale(self) -> Iterator[None]:
        try:
            yield
        except StaleEpoch as exc:
            self.on_stale(exc.msg)
            raise

    def left(self, sup: Supervisor, configured: Mapping[str, object]
             ) -> tuple[list[list[str]], list[str]]:
        """The recorded stops to finish, taken over as this generation's: levels for
        backend.api_instances' ``_stop_rest`` (the first, not asked again, is the
        instances of their stacks being stopped, which the next waits for: the level
        the cut stop asked last), and the commands they were recorded by. Records of
        instances gone (not in ``configured``) are forgotten. Raises nothing: a failure
        is logged and nothing is stopped; so is a row that cannot be read (STATE_CORRUPT,
        once)."""
        try:
            rows, damaged = self.store.stops_to_ask()
            if damaged and not self._damage_told:
                self._damage_told = True
                log.error("STATE_CORRUPT: backend.db: %d rows of stops_to_ask cannot be "
                          "read; they are left as they are and stop nothing", damaged)
            keep = [r for r in rows if r[0] in configured and r[0] in sup.instances]
            with self._fenced_if_stale():
                self.store.drop_stops([r[0] for r in rows if r not in keep], None)
                self.store.claim_stops([r[0] for r in keep], self.activation)
        except Exception as exc:
            log.error("the stops a `tenure stop` had still to ask cannot be taken over "
                      "from backend.db (%s); nothing is stopped on their account", exc)
            return [], []
        if not keep:
            return [], []
        levels: dict[int, list[str]] = {}
        for key, level, _ in keep:
            levels.setdefault(level, []).append(key)
        recorded = {r[0] for r in keep}
        stacks = {k.split("/")[0] for k in recorded}
        under_way = [k for k, i in sup.instances.items()
                     if k.split("/")[0] in stacks and k not in recorded
                     and (i.state is im.State.STOPPING or sup.leaving(k))]
        commands = list(dict.fromkeys(r[2] for r in keep))
        return [under_way, *(levels[n] for n in sorted(levels))], commands
