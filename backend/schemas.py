"""The durable formats this release reads and writes, declared for the guardian's
schema gate (guardian/schemas.py) through ``python -m backend --preflight``.

Keys: ``backend.db`` (the file's ``format_version``), ``backend.db:<part>`` (a part's
version: its tables are added once, never rewritten; see BackendStore.ensure_part) and
``checkpoint`` (the handoff checkpoint a generation writes when it hands over and the
next one reads). Changes are expand-only: a new part, or new columns with defaults in a
new part version that still reads the old one. A release that cannot read what is on
disk, or a checkpoint its predecessor writes, is refused before anything is drained.
"""

from __future__ import annotations

from protocol.handover import FORMAT as HANDOVER_FORMAT

from .events import FORMAT as EVENTS_FORMAT
from .events import PART as EVENTS_PART
from .jobs.ledger import FORMAT as JOBS_FORMAT
from .jobs.ledger import FORMS_FORMAT, FORMS_PART
from .store import FORMAT as BACKEND_DB_FORMAT
from .store import (
    HOLDER_FORMAT,
    HOLDER_PART,
    RETIRED_FORMAT,
    RETIRED_PART,
    STARTS_FORMAT,
    STARTS_PART,
    STOPS_FORMAT,
    STOPS_PART,
    WAITS_FORMAT,
    WAITS_PART,
)

__all__ = ["SCHEMAS"]

SCHEMAS: dict[str, dict[str, object]] = {
    "reads": {"backend.db": [BACKEND_DB_FORMAT], f"backend.db:{EVENTS_PART}": [EVENTS_FORMAT],
              "backend.db:jobs": [JOBS_FORMAT], f"backend.db:{RETIRED_PART}": [RETIRED_FORMAT],
              f"backend.db:{STARTS_PART}": [STARTS_FORMAT],
              f"backend.db:{WAITS_PART}": [WAITS_FORMAT],
              f"backend.db:{STOPS_PART}": [STOPS_FORMAT],
              f"backend.db:{HOLDER_PART}": [HOLDER_FORMAT],
              f"backend.db:{FORMS_PART}": [FORMS_FORMAT], "checkpoint": [HANDOVER_FORMAT]},
    "writes": {"backend.db": BACKEND_DB_FORMAT, f"backend.db:{EVENTS_PART}": EVENTS_FORMAT,
               "backend.db:jobs": JOBS_FORMAT, f"backend.db:{RETIRED_PART}": RETIRED_FORMAT,
               f"backend.db:{STARTS_PART}": STARTS_FORMAT,
               f"backend.db:{WAITS_PART}": WAITS_FORMAT,
               f"backend.db:{STOPS_PART}": STOPS_FORMAT,
               f"backend.db:{HOLDER_PART}": HOLDER_FORMAT,
               f"backend.db:{FORMS_PART}": FORMS_FORMAT, "checkpoint": HANDOVER_FORMAT},
}
