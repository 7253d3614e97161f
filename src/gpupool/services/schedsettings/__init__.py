"""The scheduler's live settings, owned by the site: the knobs of ``domain.schedsettings``
as a versioned record (``_record``: the live version, a change, a rollback, the history), read
by the control loop when the server starts and handed to it with each new version
(``LoopSide.policy_changed``). It imports ``services.core`` only.
"""

from __future__ import annotations

from gpupool.services.schedsettings._record import (
    HISTORY_LIMIT,
    SettingsChanged,
    SettingsUnchanged,
    change,
    config,
    environment_knobs,
    history,
    live_policy,
    record,
    rollback,
)

__all__ = [
    "HISTORY_LIMIT",
    "SettingsChanged",
    "SettingsUnchanged",
    "change",
    "config",
    "environment_knobs",
    "history",
    "live_policy",
    "record",
    "rollback",
]
