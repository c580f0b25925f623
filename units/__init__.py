"""tenure's service units: model, rendering (systemd units, launchd plists) and install plans.

Flow: ``Installation.for_scope(...)`` → ``prepare`` (writes a reviewable plan, no OS
change) → operator review → ``install`` (exactly that plan; enable, never start) →
``status`` / ``uninstall``. See docs/service.md.
"""

from .install import (
    PLAN_FORMAT,
    Plan,
    PlannedFile,
    Removal,
    Systemctl,
    SystemctlLike,
    install,
    live_sockets,
    load_plan,
    prepare,
    status,
    uninstall,
)
from .model import (
    GUARDIAN_LABEL,
    GUARDIAN_UNIT,
    OWNER_LABEL,
    OWNER_UNIT,
    Installation,
    Manager,
    Scope,
    ServiceSpec,
    services,
)
from .render import exec_word, plist_name, quote_env, render_launchd, render_systemd

__all__ = [
    "GUARDIAN_LABEL",
    "GUARDIAN_UNIT",
    "OWNER_LABEL",
    "OWNER_UNIT",
    "PLAN_FORMAT",
    "Installation",
    "Manager",
    "Plan",
    "PlannedFile",
    "Removal",
    "Scope",
    "ServiceSpec",
    "Systemctl",
    "SystemctlLike",
    "exec_word",
    "install",
    "live_sockets",
    "load_plan",
    "plist_name",
    "prepare",
    "quote_env",
    "render_launchd",
    "render_systemd",
    "services",
    "status",
    "uninstall",
]
