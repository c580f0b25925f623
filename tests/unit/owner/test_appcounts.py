"""owner.appcounts: per-app counters of the journal, bounded to the apps counted last."""

from owner.appcounts import APPS_MAX, AppCounts
from owner.journal import Journal, LogSource
from protocol.framing import DEFAULT_MAX_FRAME, encode_frame


def test_sums_add_up_per_app() -> None:
    c = AppCounts(2)
    c.add(("s", "a"), 1, 10)
    c.add(("s", "b"), 2, 20)
    c.add(("s", "a"), 3, 30)
    assert c.sums() == {("s", "a"): (4, 40), ("s", "b"): (2, 20)}


def test_the_app_counted_longest_ago_is_forgotten_past_the_limit() -> None:
    c = AppCounts(1, limit=3)
    for app in ("a", "b", "c"):
        c.add(("s", app), 1)
    c.add(("s", "a"), 1)        # a counted again: b is now the oldest
    c.add(("s", "d"), 1)
    assert c.sums() == {("s", "c"): (1,), ("s", "a"): (2,), ("s", "d"): (1,)}
    c.add(("s", "b"), 5)        # forgotten before: starts again from 0
    assert c.sums()[("s", "b")] == (5,)
    assert len(c.sums()) == 3


def test_sums_is_a_copy() -> None:
    c = AppCounts(1)
    c.add(("s", "a"), 1)
    c.sums().clear()
    assert c.sums() == {("s", "a"): (1,)}


def test_the_journal_counts_at_most_apps_max_apps(tmp_path) -> None:
    """Tens of thousands of app names made metrics.read's answer larger than a frame."""
    with Journal(tmp_path / "journal.db") as j:
        for i in range(APPS_MAX + 50):
            j.append(LogSource("s", f"app{i}", 0, 1), "stdout", [(b"x", 0)])
        j.flush()
        written = j.written_by_app()
    assert len(written) == APPS_MAX
    assert ("s", "app0") not in written
    assert written[("s", f"app{APPS_MAX + 49}")] == (1, 1)


def test_the_longest_names_of_every_app_kept_fit_half_a_frame() -> None:
    """metrics.read's ``logs``, as the owner answers it, at its largest."""
    c = AppCounts(2)
    for i in range(APPS_MAX + 10):
        name = f"{i:06d}" + "\U0001f600" * 122       # 128 characters, 494 bytes
        c.add((name, name), 2**40, 2**50)
    logs = [{"stack": st, "app": app, "lines": n, "bytes": b}
            for (st, app), (n, b) in sorted(c.sums().items())]
    assert len(encode_frame({"logs": logs})) < DEFAULT_MAX_FRAME // 2
