"""compute_changes: what a plan says for one kind of change, and nothing more."""

from __future__ import annotations

from backend.config import parse_config
from backend.plan import compute_changes

BASE = '[stacks.s.apps.a]\ncommand = ["srv"]\n'


def _changes(after: str) -> list[dict]:
    return compute_changes(parse_config(BASE, "old.toml"), parse_config(after, "new.toml"))


def test_a_socket_or_fd_store_change_is_a_restart_and_not_also_an_update():
    """Was: `restart … (definition changed)` and a spurious `update … (policy changed)`."""
    for extra, key in (('[stacks.s.apps.a.sockets.http]\nlisten = "127.0.0.1:18080"\n',
                        "sockets"), ("fd_store_max = 4\n", "fd_store_max")):
        assert _changes(BASE + extra) == [{"action": "restart", "app": "s/a", "instances": 1,
                                           "reason": f"definition changed: {key}",
                                           "changed": [key]}], extra


def test_a_plan_names_the_keys_that_changed_never_their_values():
    """Was `restart s/a (definition changed)`, `update s/a (policy changed)`: which key
    was left to guess. An env value may be a secret: only its key is named."""
    after = BASE.replace('["srv"]', '["srv", "-v"]')
    assert after != BASE
    changes = _changes(after + 'env = { TOKEN = "s3cret" }\nrestart = "never"\n'
                       'backoff = { initial = 2 }\n')
    assert changes == [
        {"action": "restart", "app": "s/a", "instances": 1,
         "reason": "definition changed: command, env", "changed": ["command", "env"]},
        {"action": "update", "app": "s/a", "reason": "policy changed: backoff, restart",
         "changed": ["backoff", "restart"]}]
    assert "s3cret" not in str(changes)


def test_a_policy_change_is_an_update_only():
    assert _changes(BASE + 'restart = "never"\n') == [
        {"action": "update", "app": "s/a", "reason": "policy changed: restart",
         "changed": ["restart"]}]


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


SOCK = '[stacks.s.apps.a.sockets.http]\nlisten = "unix:/run/s/a.sock"\n'
HELD = {"key": "s/a/http@unix:/run/s/a.sock", "backlog": 4096, "mode": None, "user": None,
        "group": None}


def _socket_changes(old: str, new: str, held: list[dict] | None) -> list[dict]:
    """Changes from ``old`` to ``new`` with the owner holding ``held`` (None: an owner
    without socketUpdate), and the steps of them."""
    from backend.activation import retuned
    from backend.plan import steps_for
    o, n = parse_config(BASE + old, "o"), parse_config(BASE + new, "n")
    changes = compute_changes(o, n, retune=None if held is None else retuned(n, held))
    return [*changes, *steps_for(n, changes)]


def test_a_held_sockets_backlog_mode_or_owner_is_changed_in_place_not_by_a_restart():
    for extra in ("backlog = 16\n", 'mode = "0660"\n', 'group = "root"\n'):
        assert _socket_changes(SOCK, SOCK + extra, [HELD]) == [
            {"action": "update", "app": "s/a", "reason": "socket settings changed",
             "sockets": ["http"]},
            {"do": "update_sockets", "app": "s/a", "sockets": ["http"]}], extra


def test_with_the_policy_too_it_is_one_update():
    assert _socket_changes(SOCK, 'restart = "never"\n' + SOCK + "backlog = 16\n",
                           [HELD])[0] == {"action": "update", "app": "s/a", "reason":
                                          "policy changed: restart; socket settings "
                                          "changed", "changed": ["restart"],
                                          "sockets": ["http"]}


def test_what_the_owner_holds_decides_not_the_old_config():
    """A socket not held yet is bound as declared by its launch: nothing to update. One
    held with other settings than the config's (an operation that failed before its
    update, an owner handed its sockets over) is updated even with the config as it
    was."""
    assert _socket_changes(SOCK, SOCK + "backlog = 16\n", []) == []
    assert _socket_changes(SOCK + "backlog = 16\n", SOCK + "backlog = 16\n", [HELD]) == [
        {"action": "update", "app": "s/a", "reason": "socket settings changed",
         "sockets": ["http"]},
        {"do": "update_sockets", "app": "s/a", "sockets": ["http"]}]
    assert _socket_changes(SOCK, SOCK, [HELD]) == []


def test_an_owner_without_in_place_updates_restarts_for_them_as_before():
    assert _socket_changes(SOCK, SOCK + 'mode = "0660"\n', None) == [
        {"action": "restart", "app": "s/a", "instances": 1,
         "reason": "socket settings changed"},
        {"do": "restart_instance", "app": "s/a", "instance": 0}]


def test_a_new_address_or_name_is_still_a_restart():
    moved = SOCK.replace("/a.sock", "/b.sock")
    renamed = SOCK.replace("sockets.http", "sockets.web")
    for new in (moved, renamed):
        assert _socket_changes(SOCK, new, [HELD])[0] == {
            "action": "restart", "app": "s/a", "instances": 1,
            "reason": "definition changed: sockets", "changed": ["sockets"]}, new


def test_socket_updates_come_after_every_restart():
    """An operation resumed by an older release rebuilds its steps without
    update_sockets: put before the restarts, it shifted their indexes and the older
    release skipped a restart."""
    from backend.activation import retuned
    from backend.plan import steps_for
    old = BASE + SOCK + '[stacks.s.apps.b]\ncommand = ["b"]\ninstances = 2\n'
    new = old.replace('listen = "unix:/run/s/a.sock"\n',
                      'listen = "unix:/run/s/a.sock"\nbacklog = 16\n').replace('["b"]',
                                                                             '["b2"]')
    n = parse_config(new, "n")
    steps = steps_for(n, compute_changes(parse_config(old, "o"), n, retune=retuned(n, [HELD])))
    assert steps == [{"do": "restart_instance", "app": "s/b", "instance": 0},
                     {"do": "restart_instance", "app": "s/b", "instance": 1},
                     {"do": "update_sockets", "app": "s/a", "sockets": ["http"]}]


# db; web and cache after db; worker after web: started db, then cache and web, then worker
SHOP = ('[stacks.shop.apps.db]\ncommand = ["db"]\n'
        '[stacks.shop.apps.web]\ncommand = ["web"]\nafter = ["db"]\n'
        '[stacks.shop.apps.cache]\ncommand = ["cache"]\nafter = ["db"]\n'
        '[stacks.shop.apps.worker]\ncommand = ["worker"]\nafter = ["web"]\n')


def _stops(old: str, new: str, running: dict[str, dict[int, str]] | None = None
           ) -> tuple[list[str], list[str]]:
    """The apps the plan from ``old`` to ``new`` stops, as its changes list them and in
    the order of its steps."""
    from backend.plan import steps_for
    n = parse_config(new, "n")
    changes = compute_changes(parse_config(old, "o"), n, running)
    return ([c["app"] for c in changes if c["action"] == "stop"],
            [s["app"] for s in steps_for(n, changes) if s["do"] == "stop_app"])


def test_removed_apps_stop_in_the_reverse_of_their_start_order():
    """Was: in the order of their names, so a stack removed with `db` and `web` (after
    `db`) stopped db first, then web, whose requests then failed against no database."""
    order = ["shop/worker", "shop/cache", "shop/web", "shop/db"]
    assert _stops(SHOP + BASE, BASE) == (order, order)
    # only some of them: the same order among those
    kept = SHOP.split("[stacks.shop.apps.cache]")[0]
    assert _stops(SHOP, kept + BASE) == (["shop/worker", "shop/cache"],) * 2


def test_removed_stacks_stop_one_after_the_other_in_name_order():
    other = SHOP.replace("stacks.shop.", "stacks.aaa.")
    assert _stops(SHOP + other + BASE, BASE)[1] == [
        "aaa/worker", "aaa/cache", "aaa/web", "aaa/db",
        "shop/worker", "shop/cache", "shop/web", "shop/db"]


def test_an_app_only_still_running_stops_first_in_its_stack():
    """An app an unfinished operation left running is not in the applied config: no app
    of it can wait for it."""
    running = {"shop/db": {0: "d"}, "shop/web": {0: "d"}, "shop/cache": {0: "d"},
               "shop/worker": {0: "d"}, "shop/zzz": {0: "d"}, "s/a": {0: "d"}}
    assert _stops(SHOP + BASE, BASE, running)[1] == [
        "shop/zzz", "shop/worker", "shop/cache", "shop/web", "shop/db"]


def test_a_stored_plans_stops_keep_their_steps():
    """An operation resumed by this release from a plan stored by an earlier one (stops
    in name order) runs the steps it counted its progress in."""
    from backend.plan import steps_for
    changes = [{"action": "stop", "app": k, "instances": 1}
               for k in ("shop/cache", "shop/db", "shop/web", "shop/worker")]
    assert [s["app"] for s in steps_for(parse_config(BASE, "n"), changes)] == \
        ["shop/cache", "shop/db", "shop/web", "shop/worker"]
