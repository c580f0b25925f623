"""`tenure backend status` says whether a crashed backend could be recovered now —
ready, pending (reason) or unavailable (reason) — from the guardian's status answer as
the guardian writes it (certificate {valid, age, launches}, backend, last activation,
blocked)."""

from __future__ import annotations

from typing import Any

import pytest

from backend.cli import render

DONE = {"id": "act-1", "kind": "upgrade", "phase": "complete", "outcome": "success",
        "error": None}
ALIVE = {"activation": "act-1", "pid": 42, "alive": True}


def answer(**kw: Any) -> dict[str, Any]:
    base = {"owner": {"instance": "o-1"}, "epoch": 3,
            "selector": {"current": "r1", "previous": None, "revision": 1},
            "backend": ALIVE, "last_activation": DONE,
            "certificate": {"valid": True, "age": 12.0, "launches": 4}, "blocked": None}
    return {**base, **kw}


@pytest.mark.parametrize(("r", "state", "reason"), [
    (answer(), "ready", None),
    (answer(backend={**ALIVE, "alive": False}), "ready", None),
    (answer(certificate={"valid": False, "age": 3.0, "launches": 4}), "pending",
     "a change is in progress or just ended"),
    (answer(certificate={"valid": False, "age": None, "launches": None}), "pending",
     "no certificate yet"),
    (answer(certificate={"valid": False, "age": 3.0, "launches": 4, "invalidated": "apply",
                         "changed_at": 0.0}), "pending", "apply in progress for"),
    (answer(certificate={"valid": False, "age": None, "launches": None,
                         "error": "unreadable: database disk image is malformed"}),
     "unavailable", "the recovery certificate is unreadable"),
    (answer(last_activation={**DONE, "phase": "draining", "outcome": None}), "pending",
     "upgrade act-1 is in progress (draining)"),
    (answer(backend=None, certificate={"valid": False, "age": None, "launches": None}),
     "unavailable", "no valid certificate and no backend running"),
    (answer(blocked={"code": "RECOVERY_BLOCKED", "reason": "the owner's live inventory "
                     "differs from the certificate"}, backend=None), "unavailable",
     "recovery blocked: the owner's live inventory differs from the certificate"),
    (answer(last_activation={**DONE, "phase": "uncertain", "outcome": "uncertain"}),
     "unavailable", "activation act-1 is uncertain"),
    # was "reconcile, then `tenure backend recover`", which failed until the restore's
    # release was installed again
    (answer(last_activation={**DONE, "phase": "uncertain", "outcome": "uncertain",
                             "error": "then restoring release r0 failed: NOT_FOUND: no "
                                      "such release"}),
     "unavailable", "activation act-1 is uncertain (then restoring release r0 failed: "
     "NOT_FOUND: no such release): fix what it names first (a restore that failed: its "
     "release), then `tenure backend recover`"),
    (answer(last_activation=None), "ready", None),
    # was "ready" (a valid certificate) while every recovery attempt failed
    (answer(backend=None, last_activation={**DONE, "kind": "recover", "phase": "failed",
                                           "outcome": "failed"},
            recovery_failing={"attempt": 2, "attempts": 7, "retry_at": 0.0,
                              "error": "BACKEND_PREFLIGHT_FAILED: preflight exited 1"}),
     "unavailable", "recovery is failing: attempt 2 of 7 ended BACKEND_PREFLIGHT_FAILED: "
     "preflight exited 1; the guardian tries again now and blocks after the last"),
    (answer(recovery_failing={"attempt": 1, "attempts": 7, "retry_at": 0.0, "error": "X"}),
     "ready", None),                             # a backend runs again: it recovered
    (answer(certificate={"valid": False, "age": 1.0, "launches": 4,
                         "refused": "written by another release than the selected one"}),
     "pending", "the certificate is refused (written by another release"),
    # was "pending ... the backend writes its own within seconds" for ever: the running
    # generation's own certificate names a grant a new state.db never issued
    (answer(certificate={"valid": False, "age": 1.0, "launches": 4, "activation": "a-9",
                         "refused": "the certificate names a grant this guardian never "
                                    "issued"},
            backend={**ALIVE, "activation": "a-9"}),
     "unavailable", "the running generation's own certificate is refused (the certificate "
     "names a grant this guardian never issued): until a hot upgrade or a recovery puts a "
     "generation in control under a grant of this guardian, a recovery would be forced"),
    (answer(backend=None, certificate={"valid": False, "age": 1.0, "launches": 4,
                                       "refused": "for another owner instance"}),
     "unavailable", "recovery would refuse the certificate: for another owner instance"),
    # was "ready" (a valid certificate) or "pending ... certifies again within 5 s"
    # while the owner was gone: nothing could certify or be recovered
    (answer(owner_link={"state": "lost", "reason": "no socket at h/execution/owner.sock"}),
     "unavailable", "the guardian has lost the owner: no socket at "
     "h/execution/owner.sock; a recovery needs the owner the certificate names"),
    (answer(owner_link={"state": "owner-changed", "reason": None},
            certificate={"valid": False, "age": 3.0, "launches": 4,
                         "invalidated": "launch", "changed_at": 0.0}),
     "unavailable", "another owner instance answers the guardian; a recovery needs"),
    (answer(owner_link={"state": "reconnecting", "reason": "connection lost"}), "ready",
     None),                                      # a moment's break is not a verdict
    # was "pending (stop in progress for 11s; the backend certifies again within 5 s…)"
    # for a backend stopped with SIGSTOP: it certifies nothing until it answers
    (answer(backend={**ALIVE, "answering": False, "unanswered_since": 0.0,
                     "unanswered_why": "TIMEOUT"},
            certificate={"valid": False, "age": 3.0, "launches": 4, "invalidated": "stop",
                         "changed_at": 0.0}),
     "unavailable", "no valid certificate, and the backend is alive but NOT ANSWERING for "),
    (answer(backend={**ALIVE, "answering": False, "unanswered_since": 0.0}), "ready",
     None),                                      # its last certificate still vouches
    # was "ready" with the selected release deleted: a crash was then BLOCKED at once
    (answer(selector={"current": "r1", "previous": None, "revision": 1,
                      "current_installed": False}), "unavailable",
     "the selected release r1 is not installed: `tenure release install` it or "
     "`tenure release select` another"),
])
def test_recovery_state(r: dict[str, Any], state: str, reason: str | None) -> None:
    got = render.recovery_state(r)
    assert got["state"] == state
    if reason is None:
        assert got["reason"] is None
    else:
        assert got["reason"].startswith(reason)


def test_backend_status_prints_the_recovery_line() -> None:
    lines = [" ".join(x.split()) for x in render.backend("status", answer()).splitlines()]
    assert "recovery: ready" in lines
    pending = [" ".join(x.split()) for x in render.backend("status", answer(
        certificate={"valid": False, "age": None, "launches": None})).splitlines()]
    assert [x for x in pending if x.startswith("recovery: ")] == [
        "recovery: pending (no certificate yet; the backend certifies within 5 s once "
        "nothing is changing)"]


def test_backend_status_marks_a_release_that_is_not_installed() -> None:
    sel = {"current": "r1", "previous": "r0", "revision": 2}
    for flags, release, previous in (
            ({}, "r1", "r0"),        # a guardian that does not say is not contradicted
            ({"current_installed": False, "previous_installed": True},
             "r1 (NOT INSTALLED)", "r0"),
            ({"current_installed": True, "previous_installed": False},
             "r1", "r0 (NOT INSTALLED)")):
        lines = [" ".join(x.split()) for x in render.backend(
            "status", answer(selector={**sel, **flags})).splitlines()]
        assert f"release: {release}" in lines and f"previous: {previous}" in lines


def test_an_activation_in_progress_says_what_it_does_now() -> None:
    """Was 'upgrade: admitted' for the whole of a 30 s drain (a phase is recorded once
    done), while `tenure status` already said the backend was draining."""
    lines = [" ".join(x.split()) for x in render.backend("status", answer(
        last_activation={**DONE, "phase": "admitted", "outcome": None})).splitlines()]
    assert "last activation: act-1 upgrade: admitted (now: draining)" in lines
    done = [" ".join(x.split()) for x in render.backend("status", answer()).splitlines()]
    assert "last activation: act-1 upgrade: complete (success)" in done
