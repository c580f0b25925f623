"""The ``[retention]`` table of tenure.toml: how many finished records each part of
tenure keeps (docs/config.md, "Retention"). Records something open still needs are
never pruned, whatever the counts say.

- ``operations``: finished operations kept in backend.db (default 1,000);
- ``plans``: plans kept besides those of kept operations (default 200);
- ``launches``: rows of ended launches kept in the owner's owner.db, which hold app
  environments (default 10,000);
- ``activations``: finished guardian activations kept in state.db with their receipts
  and grants (default 1,000);
- ``removed_app_logs_days``: days the journal keeps the lines of an app the config no
  longer has, counted from its newest line (default 7; 0: at the next round).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config_lines import KeyPath
from .config_values import check_keys, get_int
from .model import RetentionSettings

__all__ = ["parse_retention"]

# the least and the most of each: below the least, what `tenure op list` or `backend
# status` shows would lose its history before anyone read it
BOUNDS = {"operations": (10, 10_000_000), "plans": (10, 10_000_000),
          "launches": (100, 10_000_000), "activations": (10, 10_000_000),
          "removed_app_logs_days": (0, 36_500)}


def parse_retention(t: Mapping[str, Any]) -> RetentionSettings:
    """Raises Invalid."""
    path: KeyPath = ("retention",)
    check_keys(t, tuple(BOUNDS), path)
    d = RetentionSettings()
    return RetentionSettings(**{k: get_int(t, k, path, getattr(d, k), lo, hi)
                                for k, (lo, hi) in BOUNDS.items()})
