"""Jobs: one-shot work admitted to a durable ledger, started at most once.

::

    model      JobTemplate, Retention, Schedule   (frozen config data)
    config     [stacks.<s>.jobs.<name>] tables → JobTemplate
    machine    Job: the state machine with its complete transition table (pure)
    ledger     backend.db tables: admission with dedup keys, compare-and-set saves
    schedule   cron due times → admissions keyed ``schedule:<template>:<due>``
    runner     starts, observes, stops and resumes jobs through the owner
    api        the ``job.*`` methods of the public API

Modules import from the package's siblings explicitly; nothing is imported here, so
``backend.model`` can use ``backend.jobs.model`` without a cycle.
"""

from __future__ import annotations

__all__: list[str] = []
