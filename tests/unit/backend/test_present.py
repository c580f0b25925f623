"""backend.cli.present's tables: columns align on terminal cells, not characters."""

from __future__ import annotations

from backend.cli.present import cells, table


def test_columns_after_wide_or_combining_characters_stay_aligned() -> None:
    """Was: widths were counted in characters: a job key of CJK characters (two cells
    each) shifted every column after it in `tenure job list`."""
    out = table([["部署作业键", "1"], ["plain", "2"], ["cafe\u0301", "3"]], ["KEY", "N"])
    header, *lines = out.splitlines()
    assert header == "KEY         N"
    # where each row's last column begins, in cells from the left edge
    assert [cells(ln[:ln.index(n)]) for ln, n in zip(lines, "123", strict=True)] == \
        [12, 12, 12]


def test_cells_counts_what_a_terminal_shows() -> None:
    assert (cells("web"), cells("部署"), cells("e\u0301")) == (3, 4, 1)
