"""`tenure release ACTION` refuses an option the action does not take, before anything
is asked of the guardian (a `remove --keep 5` must not remove the release it names)."""

from __future__ import annotations

import pytest

from backend.cli.cmdline import parser
from backend.cli.releases import check_options
from protocol.errors import BadRequest


def _args(*argv: str) -> object:
    return parser().parse_args(["release", *argv])


@pytest.mark.parametrize("argv", [
    ("seal", "out", "--sign-key", "k.pem"), ("install", "dir"), ("list",),
    ("verify", "5b0d9ee2"), ("select", "5b0d9ee2"), ("rebind", "--digest", "d"),
    ("remove", "5b0d9ee2", "--dry-run"), ("prune", "--keep", "0", "--dry-run"),
    ("prune",)])
def test_what_an_action_takes_passes(argv: tuple[str, ...]) -> None:
    check_options(_args(*argv))


@pytest.mark.parametrize(("argv", "wrong"), [
    (("remove", "5b0d9ee2", "--keep", "2"), ["--keep"]),
    (("remove", "5b0d9ee2", "--keep", "0"), ["--keep"]),     # 0 is given, not absent
    (("prune", "5b0d9ee2"), ["a release argument"]),
    (("list", "--dry-run"), ["--dry-run"]),
    (("install", "dir", "--sign-key", "k.pem"), ["--sign-key"]),
    (("select", "5b0d9ee2", "--digest", "d", "--dry-run"), ["--digest", "--dry-run"])])
def test_an_option_an_action_does_not_take_is_refused(argv: tuple[str, ...],
                                                       wrong: list[str]) -> None:
    with pytest.raises(BadRequest) as got:
        check_options(_args(*argv))
    assert got.value.msg == (f"{', '.join(wrong)}: not taken by `tenure release {argv[0]}`;"
                             " nothing was done")
    assert got.value.data == {"options": wrong}
