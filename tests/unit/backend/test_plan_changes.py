"""compute_changes: what a plan says for one kind of change, and nothing more."""

from __future__ import annotations

from backend.config import parse_config
from backend.plan import compute_changes

BASE = '[stacks.s.apps.a]\ncommand = ["srv"]\n'


def _changes(after: str) -> list[dict]:
    return compute_changes(parse_config(BASE, "old.toml"), parse_config(after, "new.toml"))


def test_a_socket_or_fd_store_change_is_a_restart_and_not_also_an_update():
    """Was: `restart … (definition changed)` and a spurious `update … (policy changed)`."""
    for extra in ('[stacks.s.apps.a.sockets.http]\nlisten = "127.0.0.1:18080"\n',
                  "fd_store_max = 4\n"):
        assert _changes(BASE + extra) == [{"action": "restart", "app": "s/a", "instances": 1,
                                   "reason": "definition changed"}], extra


def test_a_policy_change_is_an_update_only():
    assert _changes(BASE + 'restart = "never"\n') == [
        {"action": "update", "app": "s/a", "reason": "policy changed"}]


def test_rolling_restarts_go_along_after():
    """Was: in the order of the apps' names, so `aa` (after `zz`) restarted against the
    old `zz`."""
    from backend.plan import steps_for
    old = ('[stacks.s.apps.aa]\ncommand = ["a"]\nafter = ["zz"]\n'
           '[stacks.s.apps.mm]\ncommand = ["m"]\n'
           '[stacks.s.apps.zz]\ncommand = ["z"]\nafter = ["mm"]\n')
    new = old.replace('["a"]', '["a2"]').replace('["z"]', '["z2"]').replace('["m"]', '["m2"]')
    changes = compute_changes(parse_config(old, "o"), parse_config(new, "n"))
    steps = steps_for(parse_config(new, "n"), changes)
    assert [s["app"] for s in steps] == ["s/mm", "s/zz", "s/aa"], steps
