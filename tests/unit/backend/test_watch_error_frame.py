"""A frame of `status -w` (or `top`) that could not be drawn says why: as the error
object `--json` prints for any error, never a line of text in a JSON stream."""

from __future__ import annotations

import json

import pytest

from backend.cli.exits import Exit
from backend.cli.watch import error_frame
from protocol.errors import BackendUnavailable, NotFound


def test_with_json_a_frame_that_failed_is_the_error_object(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Was: `tenure --json status -w nosuch` printed `tenure: NOT_FOUND: ...` on stdout,
    once a frame, among the JSON snapshots."""
    assert error_frame(NotFound("no stack, app or instance matches 'nosuch'"),
                       True) == Exit.ERROR
    said = json.loads(capsys.readouterr().out)
    assert said["ok"] is False and said["error"]["code"] == "NOT_FOUND"
    assert error_frame(BackendUnavailable("no backend answers", {}), True) == \
        Exit.UNREACHABLE
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "BACKEND_UNAVAILABLE"


def test_without_json_a_frame_that_failed_is_a_line(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    assert error_frame(NotFound("gone"), False) == Exit.ERROR
    assert capsys.readouterr().out == "tenure: NOT_FOUND: gone\n"
