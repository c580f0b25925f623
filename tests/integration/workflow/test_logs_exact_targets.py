"""`tenure logs` reads what its targets name, no more: with ticker the only app of its
stack, `tenure logs s/ticker` also printed the output of the stack's jobs (the named
apps, all of the stack's, were read as the whole stack). `s/*` is the whole stack."""

from __future__ import annotations

CONFIG = """
[stacks.s.apps.ticker]
command = ["sh", "-c", "echo tick; exec sleep 100000"]

[stacks.s.jobs.count]
command = ["sh", "-c", "echo job line"]
"""


def test_an_app_target_reads_that_app_and_a_star_the_whole_stack(cluster):
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    cluster.cli("job", "run", "s/count", "--wait", check=True)
    app = cluster.cli_text("logs", "s/ticker", "--since", "0")
    assert "s/ticker/0: tick" in app and "job line" not in app, app
    stack = cluster.cli_text("logs", "s/*", "--since", "0")
    assert "s/ticker/0: tick" in stack and "job line" in stack, stack


def test_a_glob_that_names_nothing_says_how_to_name_a_removed_app(cluster):
    """It said 'the journal has no lines of it' of a glob, which the journal is never
    asked about."""
    cluster.up(CONFIG)
    cluster.wait_ready(1)
    res = cluster.cli("logs", "s/gone*")
    assert res.code == 1 and res.out["error"]["code"] == "NOT_FOUND", res
    assert "a glob matches the instances tenure knows" in res.out["error"]["msg"], res
    exact = cluster.cli("logs", "s/gone")
    assert "the journal has no lines of it" in exact.out["error"]["msg"], exact


def test_a_star_reads_what_the_journal_holds_of_a_removed_stack_or_app(cluster):
    """docs/cli.md: a last part that is `*` alone reads everything the journal holds of
    its parent, removed apps included. `logs 'gone/*'` was NOT_FOUND once the stack was
    taken out of the config, while `logs gone` printed its lines."""
    cluster.up(CONFIG + '\n[stacks.gone.apps.web]\ncommand = ["sh", "-c", '
                        '"echo gone line; exec sleep 100000"]\n')
    cluster.wait_ready(2)
    cluster.wait(lambda: "gone line" in cluster.cli_text("logs", "gone"), 10, "its line")
    cluster.up(CONFIG)
    for target in ("gone", "gone/*", "gone/web/*", "gone/web"):
        text = cluster.cli_text("logs", target, "--since", "0")
        assert "gone/web/0: gone line" in text, (target, text)
    res = cluster.cli("logs", "nosuch/*")
    assert "the journal has no lines of it" in res.out["error"]["msg"], res


def test_a_follower_of_a_glob_goes_on_when_the_app_it_matched_is_removed(cluster):
    """`logs -f 's/sl*'` ended with NOT_FOUND (exit 1) once slow was taken out of the
    config: its targets were resolved again for every page. `events -f` went on."""
    import time
    slow = ('[stacks.s.apps.slow]\ncommand = ["sh", "-c", "while :; do echo slow; '
            'sleep 0.2; done"]\n')
    other = '[stacks.s.apps.other]\ncommand = ["sleep", "100000"]\n'
    cluster.up(slow + other)
    cluster.wait_ready(2)
    follower = cluster.follow("logs", "-f", "-n", "1", "s/sl*")
    try:
        time.sleep(1.0)
        cluster.cli("up", "--config", str(cluster.write_config(other, "t2.toml")),
                    check=True)
        cluster.wait(lambda: "s/slow/0" not in cluster.apps(), 30, "slow removed")
        time.sleep(1.5)                      # several polls after the removal
        assert follower.poll() is None, follower.communicate(timeout=30)
    finally:
        follower.terminate()
        out, err = follower.communicate(timeout=30)
    assert "s/slow/0: slow" in out and "NOT_FOUND" not in err, (out, err)
