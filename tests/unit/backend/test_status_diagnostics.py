"""The guardian's diagnostics (runtime/supervisor-state.json) as `status` reads them when
no backend answers: a file whose fields are not of their type (changed by hand, or by
another program) is said to be unreadable, instead of failing the command with a
TypeError it did not expect."""

from __future__ import annotations

import json
import os
import time
import types
from pathlib import Path

import pytest

from backend.cli import render
from backend.cli.everyday import diagnostics
from protocol.layout import Layout

SOUND = {"kind": "tenure-supervisor-state", "format": 1, "updated_at": time.time() - 3,
         "last_activation": {"id": "a1", "kind": "start", "phase": "complete",
                             "error": None},
         "blocked": None, "backend": {"pid": 4242, "alive": True, "answering": True}}


def _read(tmp_path: Path, diag: dict) -> dict | None:
    lay = Layout(tmp_path)
    os.makedirs(Path(lay.diagnostics).parent, mode=0o700, exist_ok=True)
    Path(lay.diagnostics).write_text(json.dumps(diag))
    os.chmod(lay.diagnostics, 0o600)
    return diagnostics(types.SimpleNamespace(home=tmp_path))


def test_sound_diagnostics_are_read_as_they_are(tmp_path: Path) -> None:
    assert _read(tmp_path, SOUND) == SOUND
    assert "last activation a1 start is complete" in render.why(SOUND)


@pytest.mark.parametrize("field, value", [
    ("updated_at", "noon"), ("last_activation", "a1"), ("blocked", ["x"]),
    ("backend", 4242), ("last_activation", {"id": "a1", "error": 7}),
    ("backend", {"alive": True, "answering": False, "unanswered_since": "then"})])
def test_a_field_of_another_type_is_said_unreadable(tmp_path: Path, field: str,
                                                    value: object) -> None:
    diag = _read(tmp_path, {**SOUND, field: value})
    assert diag is not None and set(diag) == {"unreadable"}
    said = render.why(diag)
    assert said.startswith("; the guardian's diagnostics (runtime/supervisor-state.json) "
                           "cannot be read: its ") and "is not of its type" in said


def test_a_backend_that_does_not_answer_because_it_is_stopped_is_named_so() -> None:
    """A SIGSTOPped backend was said to 'may be hung', while a stopped owner or
    guardian is named with the kill -CONT that continues it."""
    import signal
    import subprocess

    from backend.cli.render_backend import why_silent
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert why_silent(proc.pid) == "it may be hung (docs/recover.md)"
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while "stopped" not in why_silent(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert why_silent(proc.pid) == (f"pid {proc.pid} is stopped (SIGSTOP or a "
                                        f"debugger); kill -CONT {proc.pid} continues it")
    finally:
        proc.kill()
        proc.wait()
    assert why_silent(None) == "it may be hung (docs/recover.md)"
