"""The fast path of `tenure status` (main._fast_status) takes only what argparse takes
the same way; anything else goes to argparse, which refuses it or reads it fully."""

from __future__ import annotations

import pytest

from backend.cli.main import _fast_status


@pytest.mark.parametrize("argv", [
    ["--home", "status"],              # the home forgotten: was run against ./status
    ["status", "status"],              # a target: was dropped silently
    ["--home=", "status"], ["--home"], [], ["--json"], ["status", "-w"]])
def test_a_line_argparse_reads_otherwise_is_left_to_it(argv: list[str]) -> None:
    assert _fast_status(argv) is None


@pytest.mark.parametrize(("argv", "home", "as_json"), [
    (["status"], None, False), (["--json", "status"], None, True),
    (["--home", "/h", "status"], "/h", False), (["status", "--home=/h", "--json"], "/h", True),
    (["--home", "/h", "status", "--home", "/g"], "/g", False),
    (["status", "--home", "status"], "status", False)])   # a home named so, as argparse
def test_a_plain_status_takes_the_fast_path(argv: list[str], home: str | None,
                                             as_json: bool) -> None:
    args = _fast_status(argv)
    assert args is not None and args.json is as_json and args.targets == []
    assert home is None or args.home.endswith(home)
