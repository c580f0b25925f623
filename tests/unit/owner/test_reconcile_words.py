"""What `tenure owner reconcile` says it proved: one launch is not 'launches'."""

from __future__ import annotations

import pytest

from owner.reconcile_cli import proven_gone


@pytest.mark.parametrize(("n", "said"), [(0, "0 launches proven gone"),
                                         (1, "1 launch proven gone"),
                                         (3, "3 launches proven gone")])
def test_the_count_agrees_with_its_noun(n: int, said: str) -> None:
    assert proven_gone(n) == said
