"""The config a generation adopts running apps by when backend.db holds none.

backend.db keeps the applied config; the recovery certificate keeps only its revision.
When backend.db was set aside (damaged: docs/recover.md, "A damaged backend.db") while
apps run, a generation cannot start from nothing: an empty config claims none of them,
and the config applied later would start each a second time beside its running
process. It adopts them by the config the operator queued with `tenure backend recover
--config FILE`, which must be the revision the certificate vouches for when it vouches
for one (comments and layout may differ: the revision is of what the config declares).
Without a config given it does not start (an empty config would claim none of the
apps). With nothing running, nothing is adopted: the generation starts empty as on a
fresh home, and a queued config is applied as any.
"""

from __future__ import annotations

from typing import Any

from protocol.errors import Uncertain

from .config import parse_recent
from .model import Config
from .queuefile import read_queued

__all__ = ["RUNBOOK", "adopting_config"]

RUNBOOK = '(docs/recover.md, "A damaged backend.db")'


def adopting_config(certificate: dict[str, Any] | None, queued: str
                    ) -> tuple[Config, str]:
    """For a backend.db without an applied config while apps run: the config queued at
    ``queued`` and its text. Raises Uncertain when none is queued (an empty config would
    claim none of the apps, and a config applied later would start each a second time),
    or when the certificate (its body) vouches for a config and the queued one is
    another revision (what the guardian's check of the recovered generation would
    find); ConfigInvalid, and what reading the queue raises."""
    want = None if certificate is None else certificate.get("config_revision")
    want = want if isinstance(want, str) and want else None
    try:
        rec = read_queued(queued)
    except FileNotFoundError:
        vouched = "no recovery certificate names one" if want is None else \
            f"the recovery certificate vouches for config revision {want[:12]}"
        raise Uncertain(
            f"backend.db holds no applied config while apps run, and {vouched}: give the "
            f"config they run by to `tenure backend recover --config FILE` {RUNBOOK}",
            {"certificate": want, "needs": "config"}) from None
    config = parse_recent(rec["text"], rec["source"])
    if want is not None and config.revision != want:
        raise Uncertain(
            f"backend.db holds no applied config, and the config given ({rec['source']}, "
            f"revision {config.revision[:12]}) is not the one the recovery certificate "
            f"vouches for (revision {want[:12]}): give the config as it was applied "
            f"{RUNBOOK}", {"certificate": want, "given": config.revision, "needs": "config"})
    return config, rec["text"]
