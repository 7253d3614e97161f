"""Python environments: a team's named, locked sets of packages that its jobs run with.

Making a version (resolved once on the server with uv), registering a prefix, listing,
showing and removing them, and resolving a job's ``environment`` at its submit
(``_environments``); turning what users give into plain requirements and a lock
(``_resolve``); what making one needs of the server (``_ports``). Each node builds a version
the first time one of its jobs needs it (``executors.environments``, ``runner.envbuild``).
"""

from __future__ import annotations

from gpupool.services.environments._environments import (
    Resolved,
    create,
    launch_lookup,
    list_environments,
    prepare,
    record,
    recorded_ref,
    register,
    remove,
    show,
    version_view,
)
from gpupool.services.environments._ports import Resolves

__all__ = [
    "Resolved",
    "Resolves",
    "create",
    "launch_lookup",
    "list_environments",
    "prepare",
    "record",
    "recorded_ref",
    "register",
    "remove",
    "show",
    "version_view",
]
