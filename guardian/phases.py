"""Activation phases: one explicit table per activation kind of which phase may follow
which, and how a failure in each phase ends.

An activation is one attempt to put a backend generation in control. There are two
shapes of it:

- a **hot handoff** (``upgrade``, and the operator's ``rollback`` to the previous
  release) moves control from a running incumbent to a candidate:
  created → checked → admitted → draining → checkpointed → fenced → retired → started →
  verified → complete (or checked → complete for ``--check``);
- a **cold start** (``start`` with no backend running, ``recover`` after a crash, and
  ``restore``, the automatic return to the previous release after a failed handoff)
  starts one generation: created → fenced → started → verified → complete.

The phase advances only along the table of its kind, by compare-and-set in state.db;
every advance is also a receipt row. Each non-final phase names the **ending** a failure
gets there, and every reader of the table (handoff.py, coordinator.py, boot.py) takes
the ending from it rather than deciding on its own:

- before the owner accepted the new grant nothing changed hands: ``aborted`` (the
  incumbent resumes, a cold start simply did not happen);
- after it, a handoff is ``rolled_back`` (the previous release is restored under a fresh
  epoch) and a cold start ``failed`` (its generation is stopped; the guardian retries or
  blocks); a ``restore`` that fails has nothing left to try: ``uncertain``.

``uncertain`` may also follow any open phase when identity or inventory cannot be proven,
and ``blocked`` ends a recovery the certificate does not cover. The tables are checked
for completeness at import (and in a test).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["FINAL", "FLOWS", "Flow", "Kind", "Outcome", "Phase", "allowed", "ending",
           "outcome_of", "reaching"]


class Kind(StrEnum):
    START = "start"          # no backend was running: start the selected release
    UPGRADE = "upgrade"      # hot handoff from the incumbent to a candidate
    ROLLBACK = "rollback"    # hot handoff back to the previous release (operator)
    RECOVER = "recover"      # the backend died: restart from the recovery certificate
    RESTORE = "restore"      # a handoff failed after the fence: previous release, cold


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
    ABORTED = "aborted"          # failed or cancelled before the fence: nothing changed hands
    ROLLED_BACK = "rolled_back"  # failed after the fence: previous release restored
    FAILED = "failed"            # a cold start failed after the fence: its generation stopped
    UNCERTAIN = "uncertain"      # identity or inventory could not be proven: operator
    BLOCKED = "blocked"          # recovery refused: the certificate does not cover the world


class Outcome(StrEnum):
    SUCCESS = "success"
    CHECK_ONLY = "check-only"
    ABORTED = "aborted"
    ROLLED_BACK = "rolled-back"
    FAILED = "failed"
    UNCERTAIN = "uncertain"
    BLOCKED = "blocked"


FINAL = frozenset({Phase.COMPLETE, Phase.ABORTED, Phase.ROLLED_BACK, Phase.FAILED,
                   Phase.UNCERTAIN, Phase.BLOCKED})
ENDINGS = FINAL - {Phase.COMPLETE}

_OUTCOME = {Phase.ABORTED: Outcome.ABORTED, Phase.ROLLED_BACK: Outcome.ROLLED_BACK,
            Phase.FAILED: Outcome.FAILED, Phase.UNCERTAIN: Outcome.UNCERTAIN,
            Phase.BLOCKED: Outcome.BLOCKED}


@dataclass(frozen=True)
class Flow:
    """One kind's table: ``next[phase]`` are the phases that may follow (endings other
    than the phase's own failure ending and ``uncertain`` included explicitly), and
    ``on_failure[phase]`` is the ending a failure gets in that phase."""

    next: dict[Phase, frozenset[Phase]]
    on_failure: dict[Phase, Phase]
    line: tuple[Phase, ...] = ()   # the main line, created → complete


def _chain(steps: list[Phase], extra: dict[Phase, set[Phase]],
           on_failure: dict[Phase, Phase]) -> Flow:
    """Build a flow from its main line: each step may go to the next one, to its failure
    ending and to ``uncertain``; ``extra`` adds other allowed moves."""
    nxt: dict[Phase, frozenset[Phase]] = {}
    for i, phase in enumerate(steps[:-1]):
        allowed_here = {steps[i + 1], on_failure[phase], Phase.UNCERTAIN} | extra.get(phase,
                                                                                      set())
        nxt[phase] = frozenset(allowed_here)
    for end in FINAL:
        nxt[end] = frozenset()
    return Flow(nxt, on_failure, tuple(steps))


_HOT_LINE = [Phase.CREATED, Phase.CHECKED, Phase.ADMITTED, Phase.DRAINING, Phase.CHECKPOINTED,
             Phase.FENCED, Phase.RETIRED, Phase.STARTED, Phase.VERIFIED, Phase.COMPLETE]
_HOT_FAILURE = {
    Phase.CREATED: Phase.ABORTED, Phase.CHECKED: Phase.ABORTED,
    Phase.ADMITTED: Phase.ABORTED, Phase.DRAINING: Phase.ABORTED,
    Phase.CHECKPOINTED: Phase.ABORTED,
    # the owner accepted the candidate's grant: the incumbent is fenced off for good
    Phase.FENCED: Phase.ROLLED_BACK, Phase.RETIRED: Phase.ROLLED_BACK,
    Phase.STARTED: Phase.ROLLED_BACK, Phase.VERIFIED: Phase.ROLLED_BACK,
}
_HOT = _chain(_HOT_LINE, {Phase.CHECKED: {Phase.COMPLETE}}, _HOT_FAILURE)

_COLD_LINE = [Phase.CREATED, Phase.FENCED, Phase.STARTED, Phase.VERIFIED, Phase.COMPLETE]


def _cold(after_fence: Phase, extra: dict[Phase, set[Phase]] | None = None) -> Flow:
    return _chain(_COLD_LINE, extra or {}, {
        Phase.CREATED: Phase.ABORTED, Phase.FENCED: after_fence,
        Phase.STARTED: after_fence, Phase.VERIFIED: after_fence})


FLOWS: dict[Kind, Flow] = {
    Kind.UPGRADE: _HOT,
    Kind.ROLLBACK: _HOT,
    Kind.START: _cold(Phase.FAILED),
    Kind.RECOVER: _cold(Phase.FAILED, {Phase.CREATED: {Phase.BLOCKED}}),
    Kind.RESTORE: _cold(Phase.UNCERTAIN),
}


def _check_tables() -> None:
    """Every kind has a row for every phase it uses, every open phase a failure ending,
    and every phase reachable from ``created`` can reach ``complete``."""
    for kind in Kind:
        flow = FLOWS[kind]
        for phase, nxt in flow.next.items():
            if phase in FINAL:
                assert not nxt, (kind, phase)
                continue
            assert flow.on_failure[phase] in ENDINGS, (kind, phase)
            assert flow.on_failure[phase] in nxt, (kind, phase)
            assert Phase.UNCERTAIN in nxt, (kind, phase)
            assert all(n in flow.next for n in nxt), (kind, phase)
        assert set(flow.on_failure) == set(flow.next) - FINAL, kind
        assert Phase.CREATED in flow.next and Phase.COMPLETE in flow.next, kind


_check_tables()


def allowed(kind: Kind, current: Phase, new: Phase) -> bool:
    return new in FLOWS[kind].next.get(current, frozenset())


def ending(kind: Kind, phase: Phase) -> Phase:
    """The ending a failure gets in ``phase`` (a final phase is its own ending)."""
    if phase in FINAL:
        return phase
    return FLOWS[kind].on_failure[phase]


def reaching(kind: Kind, phase: Phase) -> Phase:
    """The phase an activation that last reached ``phase`` was working towards: the one
    a failure there is said to fail in (docs/upgrade.md names each check by the phase it
    guards: a preflight failure is one in ``checked``, though only ``created`` was
    recorded). A final phase, or one off the main line, is itself."""
    line = FLOWS[kind].line
    if phase not in line or phase is line[-1]:
        return phase
    return line[line.index(phase) + 1]


def outcome_of(end: Phase) -> Outcome:
    return _OUTCOME[end]
