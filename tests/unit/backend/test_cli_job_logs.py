"""`tenure job logs ID -n N` against a real journal in a temporary directory: the tail is
asked of the journal, not cut from every line (no processes, no sleeps)."""

from __future__ import annotations

import io
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.cli.jobs import job_command
from owner.journal import Journal, LogSource
from owner.service_shapes import LOGS_PAGE_BYTES
from protocol.errors import BadRequest

JOB = LogSource("j", "job:x", 1, 1)
LINES = 5_000


class Backend:
    """Answers `job.show` and `logs` as the backend does, from a real journal; counts
    the records it sent."""

    def __init__(self, journal: Journal) -> None:
        self.journal, self.sent = journal, 0

    def __call__(self, args: Any, method: str, params: dict[str, Any]) -> Any:
        if method == "job.show":
            return {"id": 1, "state": "succeeded",
                    "journal": {"stack": "j", "app": "job:x", "instance": 1}}
        assert method == "logs"
        p = dict(params)
        page = self.journal.read_page(p.pop("after", 0), p.pop("limit"),
                                      max_bytes=LOGS_PAGE_BYTES, tail=p.pop("tail", None),
                                      **p)
        self.sent += len(page.records)
        return page.to_wire()


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    j = Journal(tmp_path / "journal.db")
    j.append(JOB, "stdout", [(b"line %d" % i, 0) for i in range(LINES)])
    assert j.flush(timeout=30)
    yield j
    j.close()


def job_logs(journal: Journal, monkeypatch: pytest.MonkeyPatch, n: int | None
             ) -> tuple[str, int]:
    """What `tenure job logs 1 -n N` prints, and how many records it was sent."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    backend = Backend(journal)
    args = types.SimpleNamespace(action="logs", target="1", n=n, follow=False, stream=None,
                                 json=False, home="/nonexistent")
    assert job_command(args, backend, lambda *a: None) == 0
    return out.getvalue(), backend.sent


def test_job_logs_n_asks_the_journal_for_its_last_lines_only(journal, monkeypatch):
    """Was: every line was read (200,000 lines: 2.3 s and 119 MB) to print the last."""
    assert job_logs(journal, monkeypatch, 1) == (f"line {LINES - 1}\n", 1)
    assert job_logs(journal, monkeypatch, 3) == (
        "".join(f"line {i}\n" for i in range(LINES - 3, LINES)), 3)
    assert job_logs(journal, monkeypatch, 0) == ("", 0)    # was: every line
    shown, sent = job_logs(journal, monkeypatch, None)
    assert shown.count("\n") == sent == LINES


def test_a_negative_n_is_a_usage_error(journal, monkeypatch):
    with pytest.raises(BadRequest, match="-n -5"):
        job_logs(journal, monkeypatch, -5)


def test_job_logs_print_a_cut_line_whole_and_the_apps_bytes_unchanged(tmp_path, monkeypatch):
    """Was: each record of a cut line on a line of its own, and bytes that are not
    UTF-8 replaced with U+FFFD, as `tenure logs` did."""
    from backend.cli.logprint import CONTINUED_FLAG
    j = Journal(tmp_path / "journal.db")
    try:
        j.append(JOB, "stdout", [(b"a" * 10, CONTINUED_FLAG), (b"b" * 5, 0),
                                 (b"\xff\xfe not utf-8", 0)])
        j.append(JOB, "stderr", [(b"oops", 0)])
        assert j.flush(timeout=30)
        raw = io.BytesIO()
        out = io.TextIOWrapper(raw, encoding="utf-8")
        monkeypatch.setattr(sys, "stdout", out)
        args = types.SimpleNamespace(action="logs", target="1", n=None, follow=False,
                                     stream=None, json=False, home=str(tmp_path))
        assert job_command(args, Backend(j), lambda *a: None) == 0
        out.flush()
        assert raw.getvalue() == (b"a" * 10 + b"b" * 5 + b"\n\xff\xfe not utf-8\n"
                                  b"oops (stderr)\n")
    finally:
        j.close()
