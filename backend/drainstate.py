"""The handing-over side of a hot handoff, in the generation that holds control: one
state machine, no clock of its own and no I/O.

::

    serving ──drain──▶ draining ──answered──▶ drained ──checkpoint──▶ checkpointed
       ▲                  │                      │                         │
       └──── resume, left, expired ──────────────┴─────────────────────────┘
                          │ fenced (the owner holds a newer epoch)
                          ▼
                      stood-down              any stage ──retire──▶ retiring
       serving ──fenced──▶ stood-down, and the process exits (no guardian holds it)

The guardian drives it with ``generation.drain``, ``checkpoint``, ``resume`` and
``retire``. A handoff the guardian does not finish is ended here: when the guardian
that asked for the drain is gone (``left``) or the stage's deadline passes with no word
from it (``expired``), the generation resumes serving as the incumbent — unless the
owner already holds a newer epoch (``fenced``): then a candidate took over and the
generation stands down for good. backend.drainwatch notices both and asks the owner;
backend.generation performs each :class:`Action`.

A generation can also be fenced off while it serves, without any drain: a guardian that
could not reach it (stopped, say) started the next generation, and the owner now holds
that one's epoch. Whoever learns of it (an owner call refused with STALE_EPOCH, the
heartbeat's epoch, the certificate's inventory) feeds ``fenced``: nothing holds the
generation then, so it stands down and exits, leaving its API socket to the next one.

Every (stage, event) pair has a cell in :data:`TRANSITIONS`, rejections included; the
table is checked at import and in a test.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

__all__ = ["HELD", "PUBLIC", "TRANSITIONS", "Action", "DrainState", "Event", "Stage", "Step"]


class Stage(StrEnum):
    SERVING = "serving"            # not in a handoff
    DRAINING = "draining"          # the drain runs: no step begins, requests refused
    DRAINED = "drained"            # the drain answered (frozen, or not in time)
    CHECKPOINTED = "checkpointed"  # the checkpoint is written: the guardian may fence
    RETIRING = "retiring"          # told to exit
    STOOD_DOWN = "stood-down"      # a newer epoch holds the owner: never acts again


class Event(StrEnum):
    DRAIN = "drain"            # generation.drain
    ANSWERED = "answered"      # the drain is answering
    CHECKPOINT = "checkpoint"  # generation.checkpoint (after its own checks passed)
    RESUME = "resume"          # generation.resume: the guardian ended the handoff
    RETIRE = "retire"          # generation.retire, or a signal to exit
    LEFT = "left"              # the process that asked for the drain is gone
    EXPIRED = "expired"        # the stage's deadline passed with no word from it
    FENCED = "fenced"          # the owner holds a newer epoch than this generation's


class Action(StrEnum):
    NONE = "none"              # nothing to do
    REFUSE = "refuse"          # the request is refused (OperationInProgress)
    WATCH = "watch"            # begin draining; watch the guardian and the deadline
    RESUME = "resume"          # serve again: end the drain, thaw, unpause
    STAND_DOWN = "stand-down"  # serve reads only; act never again
    LEAVE = "leave"            # stand down and exit: nothing holds this generation
    RETIRE = "retire"          # exit


class Step(NamedTuple):
    stage: Stage
    action: Action


HELD = frozenset({Stage.DRAINING, Stage.DRAINED, Stage.CHECKPOINTED})
"""The stages in which a guardian holds the generation: left alone, it would stay there."""

PUBLIC = {Stage.SERVING: False, Stage.DRAINING: True, Stage.DRAINED: True,
          Stage.CHECKPOINTED: True, Stage.RETIRING: True, Stage.STOOD_DOWN: True}
"""``draining`` as status answers it: whether the API refuses changes."""


def _table() -> dict[tuple[Stage, Event], Step]:
    s, e, a = Stage, Event, Action
    t: dict[tuple[Stage, Event], Step] = {}
    for held in HELD:
        t[held, e.DRAIN] = Step(held, a.REFUSE)   # one handoff at a time
        t[held, e.RESUME] = Step(s.SERVING, a.RESUME)
        t[held, e.LEFT] = Step(s.SERVING, a.RESUME)
        t[held, e.EXPIRED] = Step(s.SERVING, a.RESUME)
        t[held, e.FENCED] = Step(s.STOOD_DOWN, a.STAND_DOWN)
    t[s.DRAINING, e.ANSWERED] = Step(s.DRAINED, a.NONE)
    t[s.DRAINED, e.ANSWERED] = Step(s.DRAINED, a.NONE)
    t[s.CHECKPOINTED, e.ANSWERED] = Step(s.CHECKPOINTED, a.NONE)
    t[s.DRAINING, e.CHECKPOINT] = Step(s.DRAINING, a.REFUSE)   # not drained yet
    t[s.DRAINED, e.CHECKPOINT] = Step(s.CHECKPOINTED, a.NONE)
    t[s.CHECKPOINTED, e.CHECKPOINT] = Step(s.CHECKPOINTED, a.NONE)   # written again
    t[s.SERVING, e.DRAIN] = Step(s.DRAINING, a.WATCH)
    # the drain ends after a resume (the guardian's, or our own after it left): the
    # answer changes nothing, and nothing freezes
    t[s.SERVING, e.ANSWERED] = Step(s.SERVING, a.NONE)
    t[s.SERVING, e.CHECKPOINT] = Step(s.SERVING, a.REFUSE)
    t[s.SERVING, e.RESUME] = Step(s.SERVING, a.RESUME)   # harmless: nothing is held
    # fenced while serving: a newer generation holds the owner, and no guardian will
    # retire this one (a watch's late word says the same: epochs only grow)
    t[s.SERVING, e.FENCED] = Step(s.STOOD_DOWN, a.LEAVE)
    for late in (e.LEFT, e.EXPIRED):   # a watch's word after the handoff ended
        t[s.SERVING, late] = Step(s.SERVING, a.NONE)
    for late in (e.LEFT, e.EXPIRED, e.FENCED):
        t[s.RETIRING, late] = Step(s.RETIRING, a.NONE)
        t[s.STOOD_DOWN, late] = Step(s.STOOD_DOWN, a.NONE)
    for ended in (s.RETIRING, s.STOOD_DOWN):
        t[ended, e.DRAIN] = Step(ended, a.REFUSE)
        t[ended, e.CHECKPOINT] = Step(ended, a.REFUSE)
        t[ended, e.ANSWERED] = Step(ended, a.NONE)
        t[ended, e.RESUME] = Step(ended, a.NONE)   # nothing to resume: it cannot act
    for stage in Stage:
        t[stage, e.RETIRE] = Step(s.RETIRING, a.RETIRE)
    return t


TRANSITIONS: dict[tuple[Stage, Event], Step] = _table()


def _check_table() -> None:
    missing = [(s, e) for s in Stage for e in Event if (s, e) not in TRANSITIONS]
    assert not missing, f"drain state table misses {missing}"
    for (stage, event), step in TRANSITIONS.items():
        assert step.action is not Action.REFUSE or step.stage is stage, (stage, event)


_check_table()


class DrainState:
    """Where this generation is in a handoff it hands over from, and since when (on the
    caller's clock: :meth:`feed` is given the time)."""

    def __init__(self, now: float = 0.0) -> None:
        self.stage = Stage.SERVING
        self.since = now

    @property
    def held(self) -> bool:
        return self.stage in HELD

    def feed(self, event: Event, now: float) -> Action:
        """Apply ``event``; returns what the caller must do. Never raises: a refusal is
        ``Action.REFUSE`` and changes nothing."""
        step = TRANSITIONS[self.stage, event]
        if step.stage is not self.stage:
            self._set_state(step.stage, now)
        return step.action

    def _set_state(self, stage: Stage, now: float) -> None:
        self.stage = stage
        self.since = now
