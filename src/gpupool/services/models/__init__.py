"""The model registry: models, their versions and the archives of their files.

Registering a version from a job's outputs or an upload, listing and showing models and
resolving ``name:version`` (``_models``); what a registration needs of the server beyond the
core ports, the executor and the settings, in ``_ports``. It imports ``services.core``,
``identity`` (team quotas), ``jobs`` (a version's source job, uploads) and ``metrics`` (a
version's final metrics); deployments build on it.
"""

from __future__ import annotations

from gpupool.services.models._models import INCOMING as MODEL_INCOMING
from gpupool.services.models._models import (
    Registration,
    list_models,
    register,
    resolve_version,
    show_model,
    show_version,
)
from gpupool.services.models._models import archive_path as model_archive_path

__all__ = [
    "MODEL_INCOMING",
    "Registration",
    "list_models",
    "model_archive_path",
    "register",
    "resolve_version",
    "show_model",
    "show_version",
]
