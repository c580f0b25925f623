"""Activation phases: one explicit table of which phase may follow which.

An activation is one attempt to put a backend generation in control: the first start, an
upgrade (hot handoff), a rollback, or a crash recovery. Its phase advances only along
this table, by compare-and-set in state.db; every advance is also a receipt row.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["FINAL", "NEXT", "Kind", "Outcome", "Phase", "allowed"]


class Kind(StrEnum):
    START = "start"          # no backend was running: start the selected release
    UPGRADE = "upgrade"      # hot handoff from the incumbent to a candidate
    ROLLBACK = "rollback"    # an upgrade to the previous release
    RECOVER = "recover"      # the backend died: restart from the recovery certificate


class Phase(StrEnum):
    CREATED = "created"
    CHECKED = "checked"
    ADMITTED = "admitted"
    DRAINING = "draining"
    CHECKPOINTED = "checkpointed"
    FENCED = "fenced"
    RETIRED = "retired"
    STARTED = "started"
    VERIFIED = "verified"
    COMPLETE = "complete"
    # endings other than complete
    ABORTED = "aborted"          # failed or cancelled before retirement: incumbent resumed
    ROLLED_BACK = "rolled_back"  # failed after retirement: previous release restored
    UNCERTAIN = "uncertain"      # identity or inventory could not be proven: operator
    BLOCKED = "blocked"          # recovery refused: inventory does not match certificate


class Outcome(StrEnum):
    SUCCESS = "success"
    CHECK_ONLY = "check-only"
    ABORTED = "aborted"
    ROLLED_BACK = "rolled-back"
    UNCERTAIN = "uncertain"
    BLOCKED = "blocked"


FINAL = frozenset({Phase.COMPLETE, Phase.ABORTED, Phase.ROLLED_BACK, Phase.UNCERTAIN,
                   Phase.BLOCKED})

# phase -> phases that may follow it. Before retirement a failure aborts (the incumbent
# resumes); after it, a failure rolls back or, if nothing can be proven, is uncertain.
NEXT: dict[Phase, frozenset[Phase]] = {
    Phase.CREATED: frozenset({Phase.CHECKED, Phase.ABORTED, Phase.FENCED, Phase.BLOCKED,
                              Phase.UNCERTAIN}),
    Phase.CHECKED: frozenset({Phase.ADMITTED, Phase.ABORTED, Phase.COMPLETE}),
    Phase.ADMITTED: frozenset({Phase.DRAINING, Phase.FENCED, Phase.ABORTED}),
    Phase.DRAINING: frozenset({Phase.CHECKPOINTED, Phase.ABORTED}),
    Phase.CHECKPOINTED: frozenset({Phase.FENCED, Phase.ABORTED}),
    Phase.FENCED: frozenset({Phase.RETIRED, Phase.STARTED, Phase.ROLLED_BACK,
                             Phase.UNCERTAIN, Phase.ABORTED}),
    Phase.RETIRED: frozenset({Phase.STARTED, Phase.ROLLED_BACK, Phase.UNCERTAIN}),
    Phase.STARTED: frozenset({Phase.VERIFIED, Phase.ROLLED_BACK, Phase.UNCERTAIN}),
    Phase.VERIFIED: frozenset({Phase.COMPLETE, Phase.ROLLED_BACK, Phase.UNCERTAIN}),
    Phase.COMPLETE: frozenset(),
    Phase.ABORTED: frozenset(),
    Phase.ROLLED_BACK: frozenset(),
    Phase.UNCERTAIN: frozenset(),
    Phase.BLOCKED: frozenset(),
}

RETIRED_OR_LATER = frozenset({Phase.RETIRED, Phase.STARTED, Phase.VERIFIED})


def allowed(current: Phase, new: Phase) -> bool:
    return new in NEXT[current]
