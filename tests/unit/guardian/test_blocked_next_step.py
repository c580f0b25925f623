"""What a blocked recovery tells the operator to run next (guardian.cold.next_step):
the fix for the cause it blocked on, not always `tenure backend recover`."""

from __future__ import annotations

from guardian.cold import next_step
from protocol.errors import (
    InterpreterChanged,
    NotFound,
    RecoveryBlocked,
    StateCorrupt,
    Uncertain,
)


def test_a_release_that_does_not_verify_is_replaced() -> None:
    err = NotFound("releases/ab: no such release", {"path": "x", "release": "ab" * 32})
    assert next_step(err) == ("`tenure release install` release abababababab again, then "
                              "`tenure backend recover`; or `tenure release select` another "
                              "installed one (it starts it)")


def test_a_config_set_aside_with_backend_db_is_given_back() -> None:
    """Was: `once that is fixed, tenure backend recover`, the very command that blocked."""
    err = Uncertain("backend.db holds no applied config while apps run",
                    {"certificate": None, "needs": "config"})
    assert next_step(err) == ("`tenure backend recover --config FILE` (FILE: the config "
                              "the apps run by)")


def test_a_damaged_release_is_installed_again_over_itself() -> None:
    """`release install` of the same release mends a damaged installed copy (it kept
    it, CONFLICT, and the advice then was to select another): both are said."""
    err = StateCorrupt("content of lib/x.py does not match RUNTIME.json",
                       {"file": "lib/x.py", "release": "ab" * 32})
    assert next_step(err) == (
        "`tenure release install` release abababababab again from its sealed directory (it "
        "replaces the damaged copy), then `tenure backend recover`; or `tenure release "
        "select` another installed one (it starts it)")


def test_a_changed_interpreter_is_rebound() -> None:
    err = InterpreterChanged("the interpreter changed", {"release": "ab" * 32})
    assert next_step(err).startswith("`tenure release rebind`")


def test_an_uncovered_world_is_recovered_after_a_dry_run() -> None:
    assert "--dry-run" in next_step(RecoveryBlocked("the inventory differs"))


def test_anything_else_is_recovered_by_hand_once_fixed() -> None:
    assert next_step(StateCorrupt("backend.db is malformed")) == \
        "once that is fixed, `tenure backend recover`"
