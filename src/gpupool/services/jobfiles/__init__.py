"""Job files (`gpupool apply -f`): documents of several kinds applied in one transaction.

Applying (``_apply``: read each document as its kind's request body, make them all or none,
a dry run rolled back), the registry of kinds (``_kinds``: Job, Environment, Dataset,
Volume, Notebook, Deployment; one entry each), their JSON schemas for editors
(``_schemas``), and what applying needs of the server (``_ports``). It imports
``services.core`` and the public faces of ``jobs``, ``environments``, ``datasets``,
``notebooks`` and ``deployments``, whose own steps make each document; nothing in services
builds on it.
"""

from __future__ import annotations

from gpupool.services.jobfiles._apply import apply
from gpupool.services.jobfiles._kinds import KINDS, Kind
from gpupool.services.jobfiles._ports import Applies
from gpupool.services.jobfiles._schemas import kinds, schema

__all__ = ["KINDS", "Applies", "Kind", "apply", "kinds", "schema"]
