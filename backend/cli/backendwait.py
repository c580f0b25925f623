"""What `tenure up` waits for once the owner and the guardian run: a backend generation
that answers and is ready (:func:`ensure_backend`), what the guardian says of it
meanwhile (:func:`backend_probe`), and why none came when the wait ends."""

from __future__ import annotations

import time
from typing import Any

from protocol.errors import BackendUnavailable, RecoveryBlocked
from protocol.layout import Layout

from .daemons import UP_POLL_S, ping

__all__ = ["Held", "backend_probe", "ensure_backend", "guardian_view"]


def ensure_backend(layout: Layout, timeout: float, waited: float | None = None,
                   kept: bool = False, granted: bool = False) -> dict[str, Any]:
    """Wait until a backend generation answers and is ready. Raises RecoveryBlocked as
    soon as the guardian has given up starting one (why, and what to do), else
    BackendUnavailable after ``timeout`` with why its last start failed (``waited``: the
    whole wait to name there, when part of it was spent before). The guardian is first
    asked GUARDIAN_LOOK_S in: a backend that comes up sooner costs it nothing.
    ``kept`` (a guardian this command just started): only a backend that guardian holds
    in control counts; one that outlived its guardian may be about to be retired
    (guardian.boot: attached to an owner instance that is gone). ``granted`` (an owner
    this command just started beside a running guardian): only the backend the owner's
    grant names counts; the one that answered before is attached to the owner that died,
    until the guardian moves control (about a second)."""
    deadline = time.monotonic() + timeout
    look = time.monotonic() + GUARDIAN_LOOK_S
    st, held = None, Held()
    while time.monotonic() < deadline:
        st = ping(layout.api_sock, home=layout.home)
        if st is not None and (not kept or _held(layout, st)) and \
                (not granted or _granted(layout, st)):
            return st
        if time.monotonic() >= look:
            view = guardian_view(layout)
            _refuse_if_blocked(view)
            held.check(view)
            look = time.monotonic() + GUARDIAN_LOOK_S
        time.sleep(UP_POLL_S if st is None else HELD_POLL_S)
    view = guardian_view(layout)
    _refuse_if_blocked(view)
    what = "no backend answered" if st is None else \
        (f"the backend that answers (pid {(st.get('backend') or {}).get('pid')}) is not "
         "held by the guardian")
    raise BackendUnavailable(f"{what} on {layout.api_sock} within "
                             f"{timeout if waited is None else waited:g} s"
                             f"{_last_failure(view)}; see "
                             "`tenure backend status`")


class Held:
    """A backend the wait finds stopped (SIGSTOP, a debugger) for :data:`HELD_S`: it is
    alive, so the guardian does not replace it, and no answer comes until it is
    continued; `up` waited its whole --timeout, silent when piped."""

    def __init__(self) -> None:
        self.since: float | None = None

    def check(self, view: dict[str, Any] | None) -> None:
        """Raises BackendUnavailable naming the stopped backend once it was for HELD_S."""
        from .render_backend import stopped_backend
        said = stopped_backend(view)
        if said is None:
            self.since = None
            return
        self.since = time.monotonic() if self.since is None else self.since
        if time.monotonic() - self.since >= HELD_S:
            pid = ((view or {}).get("backend") or {}).get("pid")
            raise BackendUnavailable(f"the backend does not answer and none comes until it "
                                     f"is continued: {said}",
                                     {"pid": pid, "backend_stopped": True})


HELD_S = 5.0            # a backend stopped this long ends a wait for one
GUARDIAN_LOOK_S = 0.5   # how often a wait for the backend asks the guardian how it goes
HELD_POLL_S = 0.02      # and, once one answers, whether the guardian holds it (``kept``)


def _held(layout: Layout, st: dict[str, Any]) -> bool:
    """Whether the guardian holds the backend that answered ``st`` in control (it has
    adopted it or started it); False while it does not answer."""
    held = (guardian_view(layout) or {}).get("backend") or {}
    return held.get("pid") is not None and held.get("pid") == (st.get("backend") or {}).get("pid")


def _granted(layout: Layout, st: dict[str, Any]) -> bool:
    """Whether the backend generation that answered ``st`` is attached to the owner
    that answers now and named by its grant. A new owner starts with the grant its
    records hold, which names the generation attached to the owner before it."""
    owner = ping(layout.owner_sock, home=layout.home) or {}
    grant = owner.get("grant") or {}
    mine = (owner.get("owner") or {}).get("instance")
    return grant.get("activation") is not None and mine is not None and \
        grant.get("activation") == (st.get("backend") or {}).get("activation") and \
        (st.get("owner") or {}).get("instance") == mine


def guardian_view(layout: Layout) -> dict[str, Any] | None:
    """The guardian's status, or None when it does not answer."""
    return ping(layout.guardian_sock, home=layout.home)


def _refuse_if_blocked(view: dict[str, Any] | None) -> None:
    blocked = (view or {}).get("blocked")
    if isinstance(blocked, dict):
        code = blocked.get("code")
        why = blocked.get("reason") if code in (None, "RECOVERY_BLOCKED") else \
            f"{code}: {blocked.get('reason')}"   # the cause's own code, said: UNSAFE_PATH
        then = blocked.get("next") or "once that is fixed, run `tenure backend recover`"
        raise RecoveryBlocked(f"the guardian gave up starting a backend: {why}; {then}",
                              {"cause": code})


def backend_probe(layout: Layout) -> Any:
    """What a wait for the backend waits on, for ``tenure up``'s progress line: the
    guardian's failing streak or silent backend (_last_failure), else the activation
    under way (``start: spawning``), else 'waiting for the guardian'."""
    def probe() -> str:
        view = guardian_view(layout)
        if view is None:
            return "waiting for the guardian"
        why = _last_failure(view)
        if why:
            return why[2:]
        act = view.get("last_activation") or {}
        if act.get("outcome") is None and act.get("phase"):
            return f"backend {act.get('kind')}: {act['phase']}"
        return "waiting for the backend"
    return probe


def _last_failure(view: dict[str, Any] | None) -> str:
    """'; the backend (pid N) is alive but NOT ANSWERING …' when the guardian's last
    probe of its living generation got no answer (it may be hung); '; recovery is
    failing: attempt N of M ended WHY …' while the guardian waits to retry after a failed
    start or a generation that crashed soon after it started; else '; its last start
    failed: WHY (the guardian tries again)', or '' when the most recent activation did
    not fail or the guardian does not say."""
    from .render_backend import not_answering, recovery_failing, why_silent
    backend = (view or {}).get("backend") or {}
    silent = not_answering(backend)
    if silent is not None:
        return (f"; the backend (pid {backend.get('pid')}) is alive but {silent}: "
                f"{why_silent(backend.get('pid'))}")
    failing = (view or {}).get("recovery_failing")
    if isinstance(failing, dict):
        # the streak says more than the last activation, which may have succeeded (a
        # generation that reached READY and crashed a second later) or be the next
        # attempt, still under way
        return f"; {recovery_failing(failing)}"
    recent = (view or {}).get("recent") or []
    last = recent[0] if recent and isinstance(recent[0], dict) else {}
    if last.get("outcome") in (None, "success") or not last.get("error"):
        return ""
    return f"; its last start failed: {last['error']} (the guardian tries again)"
